"""The shard service's rules as a user's own loop meets them (`troupe launch --local --
python3 SCRIPT`; one shard core serves training and key-value jobs, Note [Rounds per part]
in core/shard_core.hpp): with --backup-workers a sync round closes without the slowest
worker, whose late push is dropped without an error and whose next pull goes on from the
open round."""
import json
import os
import subprocess
import sys
import textwrap

TROUPE = os.environ.get("TROUPE_BIN", "troupe")


def launch(tmp_path, script, *flags, workers=3, timeout=240):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    cmd = [TROUPE, "launch", "--local", "--workers", str(workers), "--servers", "1", "--metrics", "off",
           "--job-dir", str(tmp_path / "job"), *flags, "--", sys.executable, str(path)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    return p, (json.loads(lines[-1]) if lines else None)


def test_a_backup_worker_round_closes_without_the_slowest_and_drops_its_late_push(tmp_path):
    # Ranks 0 and 1 run five rounds while rank 2 waits for them (with no backup the rounds
    # would wait for rank 2, and this would time out); then rank 2 pushes its round 0,
    # long closed: dropped, it changes nothing, and its pull returns what the others made.
    p, _ = launch(tmp_path, f"""
        import os, time, numpy as np, troupe
        kv = troupe.kv.create('dist_sync')
        w = np.zeros(16, np.float32)
        kv.init('w', w)
        kv.set_optimizer(lr=0.5)
        flags = {str(tmp_path)!r}
        if kv.rank < 2:
            for step in range(5):
                kv.push('w', np.full(16, kv.rank + 1, np.float32))
                kv.wait(kv.pull('w', out=w))
            open(os.path.join(flags, 'done%d' % kv.rank), 'w').close()
        else:
            deadline = time.time() + 120
            while not all(os.path.exists(os.path.join(flags, 'done%d' % r)) for r in (0, 1)):
                assert time.time() < deadline, 'ranks 0 and 1 did not finish their rounds'
                time.sleep(0.05)
            kv.push('w', np.full(16, 100, np.float32))
            kv.wait(kv.pull('w', out=w))
        print('RESULT', kv.rank, float(w[0]), float(w[15]), flush=True)
        kv.close()
    """, "--mode", "sync", "--backup-workers", "1")
    assert p.returncode == 0, p.stderr[-3000:]
    rows = sorted(line.split()[-3:] for line in p.stderr.splitlines() if "RESULT" in line)
    # Five rounds of 1 + 2 at lr 0.5: -7.5, on every rank; rank 2's 100 never applied.
    assert rows == [["0", "-7.5", "-7.5"], ["1", "-7.5", "-7.5"], ["2", "-7.5", "-7.5"]], p.stderr[-3000:]
