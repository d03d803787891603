"""The shard service's rules as a user's own loop meets them (`troupe launch --local --
python3 SCRIPT`; one shard core serves training and key-value jobs, Note [Rounds per part]
in core/shard_core.hpp): with --backup-workers a sync round closes without the slowest
worker, whose late push is dropped without an error and whose next pull goes on from the
open round; with --pull-precision 2bit a pull over the network is answered in 2-bit codes
of the change since the worker's last pull (Note [2-bit key-value pulls]), which move a
sixteenth of the bytes and keep every worker's values equal and close to the f32 ones;
in ssp a worker whose steps compute far longer than the others' is named a straggler from
its store's step reports (Note [Steps of a user's loop]) and left out of the bound, so the
others no longer go at its pace."""
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


def test_two_bit_pulls_move_a_sixteenth_of_the_bytes_and_keep_the_workers_equal(tmp_path):
    script = """
        import numpy as np, troupe
        kv = troupe.kv.create('dist_sync')
        w = np.zeros(8192, np.float32)
        kv.init('w', w)
        kv.set_optimizer(lr=0.2)
        target = np.linspace(-1, 1, 8192).astype(np.float32)
        before = kv.transfer_stats()['network_bytes']
        for step in range(40):
            kv.push('w', w - target)  # the gradient of 0.5 |w - target|^2
            kv.wait(kv.pull('w', out=w))
        moved = kv.transfer_stats()['network_bytes'] - before
        print('RESULT', kv.rank, moved, float(np.abs(w - target).mean()), w.tobytes().hex()[:64], flush=True)
        kv.close()
    """
    rows = {}
    for precision in ("fp32", "2bit"):
        p, _ = launch(tmp_path, script, "--mode", "sync", "--no-shared-memory", "--no-bulk-lanes",
                      "--pull-precision", precision, workers=2)
        assert p.returncode == 0, p.stderr[-3000:]
        rows[precision] = sorted(line.split()[-4:] for line in p.stderr.splitlines() if "RESULT" in line)
        assert len(rows[precision]) == 2
        # In sync both workers hold the same values: the same codes, the same sums.
        assert rows[precision][0][3] == rows[precision][1][3], precision
    f32_moved, two_bit_moved = int(rows["fp32"][0][1]), int(rows["2bit"][0][1])
    # Each step pushes 32 KiB and pulls 32 KiB in f32; 2-bit pulls are about 2 KiB.
    assert two_bit_moved < 0.6 * f32_moved, (two_bit_moved, f32_moved)
    # Both reach the target (a mean distance of 0.5 at the start); the 2-bit codes of what
    # is left of the gap go with later pulls, so the workers' values come within a little
    # of it too.
    f32_gap, two_bit_gap = float(rows["fp32"][0][2]), float(rows["2bit"][0][2])
    assert f32_gap < 1e-4 and two_bit_gap < 1e-3, (f32_gap, two_bit_gap)


def test_a_straggler_in_ssp_is_named_and_the_others_go_on_without_it(tmp_path):
    # Ranks 0 and 1 compute 10 ms a step, rank 2 200 ms. Held by a bound of 2 pushes, the
    # fast ones could not finish their 40 steps before rank 2 had made 38; named a
    # straggler, rank 2 is left out of the bound and has made far fewer when they finish.
    p, _ = launch(tmp_path, f"""
        import os, time, numpy as np, troupe
        kv = troupe.kv.create('dist_ssp', timeout=60)
        w = np.zeros(16, np.float32)
        kv.init('w', w)
        kv.set_optimizer(lr=0.01)
        kv.barrier()
        flags = {str(tmp_path)!r}
        fast_done = lambda: all(os.path.exists(os.path.join(flags, 'done%d' % r)) for r in (0, 1))
        steps = 0
        while steps < 40 and not (kv.rank == 2 and fast_done()):
            time.sleep(0.2 if kv.rank == 2 else 0.01)
            kv.push('w', np.ones(16, np.float32))
            kv.wait(kv.pull('w', out=w))
            steps += 1
        if kv.rank < 2:
            open(os.path.join(flags, 'done%d' % kv.rank), 'w').close()
        print('STEPS', kv.rank, steps, flush=True)
        kv.close()
    """, "--mode", "ssp", "--staleness", "2")
    assert p.returncode == 0, p.stderr[-3000:]
    steps = dict(tuple(map(int, line.split()[-2:])) for line in p.stderr.splitlines() if "STEPS" in line)
    assert steps[0] == 40 and steps[1] == 40, p.stderr[-3000:]
    assert "worker 2 is a straggler" in p.stderr, p.stderr[-3000:]
    assert steps[2] < 25, p.stderr[-3000:]
