"""process_tree: finding a launched job's processes, for tests that kill one of them."""
import os


def child_with(parent, words):
    """The pid of a child process of `parent` whose command line or environment holds one
    of `words` ("a|b"), or None."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline") as f, open(f"/proc/{pid}/environ") as e:
                text = f.read().replace("\0", " ") + " " + e.read().replace("\0", " ")
        except OSError:
            continue
        if ppid == parent and any(w in text.split(" ") or (" " in w and w in text) for w in words.split("|")):
            return int(pid)
    return None
