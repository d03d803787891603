"""process_tree: finding a launched job's processes, for tests that kill one of them, and
reading a launch's output as it comes while such a test waits on it."""
import os
import subprocess
import threading


class Drained(subprocess.Popen):
    """A process whose stdout and stderr (text) are read as they come: a pipe that nobody
    reads fills at 64 KiB, and a job that logs that much while a test polls for its
    checkpoint would block writing and never reach it. communicate() returns all of both."""

    def __init__(self, cmd, **kw):
        super().__init__(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
        self._got = ([], [])
        self._readers = [threading.Thread(target=self._drain, args=(f, into), daemon=True)
                         for f, into in zip((self.stdout, self.stderr), self._got)]
        for t in self._readers:
            t.start()

    @staticmethod
    def _drain(f, into):
        for line in f:
            into.append(line)

    def stderr_so_far(self):
        return "".join(self._got[1])

    def communicate(self, input=None, timeout=None):
        self.wait(timeout)
        for t in self._readers:
            t.join(timeout)
        return "".join(self._got[0]), "".join(self._got[1])


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


def kill_after_checkpoint(proc, ckpt, step, words):
    """Kills the child of the launch `proc` (a Drained) that `words` name (as child_with)
    once checkpoint `step` in the directory `ckpt` is complete. A launch that ends first,
    or 120 s without it, fails the test with what the launch said."""
    import signal
    import time
    done = ckpt / f"ckpt-{step:012d}" / "MANIFEST.tf"
    deadline, victim = time.time() + 120, None
    while time.time() < deadline and proc.poll() is None and \
            not (done.exists() and (victim := child_with(proc.pid, words))):
        time.sleep(0.01)
    if not victim:
        how = f"ended with {proc.returncode}" if proc.poll() is not None else "ran on for 120 s"
        raise AssertionError(f"no checkpoint {step} and {words} to kill; the launch {how}: "
                             f"{proc.stderr_so_far()[-3000:]}")
    os.kill(victim, signal.SIGKILL)
