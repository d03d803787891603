"""Checkpoints of a user's own loop (`troupe launch --local --checkpoint-dir DIR
--checkpoint-every N -- python3 SCRIPT`, Note [Key-value checkpoints] in
core/kv_checkpoint.hpp): the shards keep every key's values, the shards' optimizer and its
momentum, and a run resumed from them (--resume DIR) that goes on from kv.resumed_step
ends bitwise where an uninterrupted run does; a shard server killed mid-run is started
again by launch (--max-restarts, 3 by default) and restores its keys from the newest
checkpoint while the loops go on (or, with nothing in its place, the job ends saying so);
one key on two shard servers is checkpointed too, and with --on-shard-loss fail a lost
server rolls the whole job back to its newest checkpoint, ending bitwise where an
uninterrupted run does; a resume on another number of shard servers, and a key-value job's checkpoint flags without
--checkpoint-every, are refused saying what to do."""
import json
import os
import subprocess
import sys
import textwrap

from process_tree import Drained, kill_after_checkpoint

TROUPE = os.environ.get("TROUPE_BIN", "troupe")

# Two keys, momentum SGD on the shards; each step pushes seeded gradients of every key and
# pulls them, counting its steps from kv.resumed_step. Prints the final bits.
LOOP = """
    import sys, numpy as np, troupe
    kv = troupe.kv.create('dist_sync')
    w, b = np.zeros((8, 4), np.float32), np.zeros(3, np.float32)
    kv.init('w', w)
    kv.init('b', b)
    kv.set_optimizer(lr=0.05, momentum=0.9)
    steps = int(sys.argv[1])
    for step in range(kv.resumed_step, steps):
        g = np.random.default_rng(1000 * step + kv.rank)
        kv.push('w', g.standard_normal((8, 4)).astype(np.float32))
        kv.push('b', g.standard_normal(3).astype(np.float32))
        kv.wait(kv.pull('w', out=w))
        kv.wait(kv.pull('b', out=b))
        PAUSE
    print('RESULT', kv.rank, kv.resumed_step, w.tobytes().hex() + b.tobytes().hex(), flush=True)
    kv.close()
"""


def launch(tmp_path, steps, *flags, pause="pass", servers=2, job="job", timeout=240, wait=True):
    path = tmp_path / "loop.py"
    path.write_text(textwrap.dedent(LOOP).replace("PAUSE", pause))
    cmd = [TROUPE, "launch", "--local", "--workers", "2", "--servers", str(servers), "--metrics", "off", "--mode",
           "sync", "--job-dir", str(tmp_path / job), *flags, "--", sys.executable, str(path), str(steps)]
    if not wait:
        return Drained(cmd, env=os.environ)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ)


def results(p_stderr):
    return sorted(line.split()[-3:] for line in p_stderr.splitlines() if "RESULT" in line)


def test_a_resumed_loop_ends_bitwise_where_an_uninterrupted_one_does(tmp_path):
    whole = launch(tmp_path, 12, job="whole")
    assert whole.returncode == 0, whole.stderr[-3000:]
    expected = results(whole.stderr)
    assert [r[:2] for r in expected] == [["0", "0"], ["1", "0"]]
    assert expected[0][2] == expected[1][2]
    ckpt = tmp_path / "ckpt"
    first = launch(tmp_path, 10, "--checkpoint-dir", str(ckpt), "--checkpoint-every", "4", job="first")
    assert first.returncode == 0, first.stderr[-3000:]
    assert sorted(d for d in os.listdir(ckpt) if d.startswith("ckpt-")) == ["ckpt-000000000004", "ckpt-000000000008"]
    resumed = launch(tmp_path, 12, "--resume", str(ckpt), job="resumed")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got = results(resumed.stderr)
    # Both workers went on from step 8 and ended with the uninterrupted run's bits: the
    # values, the momentum and the rounds all came back.
    assert [r[:2] for r in got] == [["0", "8"], ["1", "8"]], resumed.stderr[-3000:]
    assert [r[2] for r in got] == [r[2] for r in expected]


def test_a_resume_on_another_number_of_shard_servers_is_refused(tmp_path):
    ckpt = tmp_path / "ckpt"
    first = launch(tmp_path, 4, "--checkpoint-dir", str(ckpt), "--checkpoint-every", "2", job="first")
    assert first.returncode == 0, first.stderr[-3000:]
    again = launch(tmp_path, 6, "--resume", str(ckpt), servers=3, job="again")
    assert again.returncode != 0
    assert "resumes on as many: start it with --servers 2" in again.stderr, again.stderr[-3000:]


def test_checkpoints_of_a_key_value_job_need_checkpoint_every(tmp_path):
    p = launch(tmp_path, 2, "--checkpoint-dir", str(tmp_path / "ckpt"))
    assert p.returncode != 0
    assert "needs --checkpoint-every N" in p.stderr, p.stderr[-3000:]


# A loop that prints what the store says after a shard was replaced: each step pushes
# seeded gradients of both keys and pulls them; at the end it prints kv.restored_step.
RESTORED = """
    import sys, numpy as np, troupe
    kv = troupe.kv.create(sys.argv[2])
    w, b = np.zeros((8, 4), np.float32), np.zeros(3, np.float32)
    kv.init('w', w)
    kv.init('b', b)
    kv.set_optimizer(lr=0.05, momentum=0.9)
    for step in range(int(sys.argv[1])):
        g = np.random.default_rng(1000 * step + kv.rank)
        kv.push('w', g.standard_normal((8, 4)).astype(np.float32))
        kv.push('b', g.standard_normal(3).astype(np.float32))
        kv.wait(kv.pull('w', out=w))
        kv.wait(kv.pull('b', out=b))
        import time; time.sleep(0.05)
    print('RESULT', kv.rank, kv.restored_step, w.tobytes().hex() + b.tobytes().hex(), flush=True)
    kv.close()
"""


def kill_a_server_after(proc, ckpt, step):
    """Kills a shard server of the launch `proc` once checkpoint `step` is complete."""
    kill_after_checkpoint(proc, ckpt, step, "--role server")


def test_a_lost_shard_server_is_replaced_while_the_loops_go_on(tmp_path):
    # Note [Replacing a key-value shard]: launch starts the killed server again, the new one
    # restores the lost shard's keys from the newest checkpoint, and both loops go on to
    # their last step without an exception, each warned once and told the step.
    for mode in ("dist_sync", "dist_async"):
        ckpt = tmp_path / f"ckpt-{mode}"
        path = tmp_path / "restored.py"
        path.write_text(textwrap.dedent(RESTORED))
        proc = Drained(
            [TROUPE, "launch", "--local", "--workers", "2", "--servers", "2", "--metrics", "off", "--mode",
             mode.removeprefix("dist_"), "--job-dir", str(tmp_path / f"job-{mode}"), "--checkpoint-dir", str(ckpt),
             "--checkpoint-every", "5", "--", sys.executable, str(path), "40", mode],
            env=os.environ)
        kill_a_server_after(proc, ckpt, 10)
        stdout, stderr = proc.communicate(timeout=240)
        assert proc.returncode == 0, stderr[-3000:]
        assert "the job lost a node" not in stderr, stderr[-3000:]  # nothing started again but the server
        got = results(stderr)
        assert len(got) == 2, stderr[-3000:]
        # Each loop ran its 40 steps in its first start and was told the step its keys went
        # back to: a checkpoint of at least 10.
        assert got[0][1] == got[1][1] and int(got[0][1]) >= 10, stderr[-3000:]
        assert stderr.count("(kv.restored_step), and the loop goes on") == 2, stderr[-3000:]  # warned once each
        if mode == "dist_sync":  # both pull the same values after the last round
            assert got[0][2] == got[1][2]
        summary = json.loads(stdout.strip().splitlines()[-1])
        assert summary["restarts"] == 0 and summary["restarts_in_place"] == 1, summary
        assert list(summary["respawned"].values()) == [1] and "server" in next(iter(summary["respawned"])), summary


def test_a_lost_shard_server_ends_the_job_when_nothing_takes_its_place(tmp_path):
    # With --max-restarts 0 launch does not start it again: the job ends after
    # --stall-timeout with shard_lost saying why, and the loops get that error.
    ckpt = tmp_path / "ckpt"
    proc = launch(tmp_path, 400, "--checkpoint-dir", str(ckpt), "--checkpoint-every", "5", "--stall-timeout", "2",
                  "--max-restarts", "0", pause="import time; time.sleep(0.05)", wait=False)
    kill_a_server_after(proc, ckpt, 5)
    _, stderr = proc.communicate(timeout=240)
    assert proc.returncode != 0
    assert "no shard server joined in its place within --stall-timeout 2 s" in stderr, stderr[-3000:]


# One key on two shard servers: it lies on one shard, and the other, holding nothing that
# reaches a step, writes its file when the coordinator asks (Note [Key-value
# checkpoints]). Prints the step the loop went on from, the step a replacement went back
# to, and the final bits.
ONE_KEY = """
    import sys, time, numpy as np, troupe
    kv = troupe.kv.create('dist_sync')
    w = np.zeros((8, 4), np.float32)
    kv.init('w', w)
    kv.set_optimizer(lr=0.05, momentum=0.9)
    for step in range(kv.resumed_step, int(sys.argv[1])):
        g = np.random.default_rng(1000 * step + kv.rank)
        kv.push('w', g.standard_normal((8, 4)).astype(np.float32))
        kv.wait(kv.pull('w', out=w))
        time.sleep(0.05)
    print('RESULT', kv.rank, kv.resumed_step, kv.restored_step, w.tobytes().hex(), flush=True)
    kv.close()
"""


def test_one_key_on_two_shards_is_checkpointed_and_a_lost_server_rolls_back_exactly(tmp_path):
    path = tmp_path / "one_key.py"
    path.write_text(textwrap.dedent(ONE_KEY))

    def run(job, *flags, kill_after=None):
        cmd = [TROUPE, "launch", "--local", "--workers", "2", "--servers", "2", "--metrics", "off", "--mode", "sync",
               "--job-dir", str(tmp_path / job), *flags, "--", sys.executable, str(path), "30"]
        proc = Drained(cmd, env=os.environ)
        if kill_after:
            kill_a_server_after(proc, tmp_path / (job + "-ckpt"), kill_after)
        out, err = proc.communicate(timeout=240)
        rows = sorted(line.split()[-4:] for line in err.splitlines() if "RESULT" in line)
        return proc.returncode, json.loads(out.strip().splitlines()[-1]), rows, err

    code, _, whole, err = run("whole")
    assert code == 0, err[-3000:]
    # --on-shard-loss fail: the job ends, and launch starts every process again from the
    # newest checkpoint; the loops go on from kv.resumed_step and end bitwise where the
    # uninterrupted run did (an exact rollback).
    code, report, rows, err = run("rollback", "--checkpoint-dir", str(tmp_path / "rollback-ckpt"),
                                  "--checkpoint-every", "5", "--on-shard-loss", "fail", kill_after=10)
    assert code == 0, err[-3000:]
    assert report["restarts"] == 1 and report["restarts_in_place"] == 0, report
    assert [r[0] for r in rows] == ["0", "1"] and all(int(r[1]) >= 10 for r in rows), rows
    assert [r[3] for r in rows] == [r[3] for r in whole]
    # The default with checkpoints: the lost shard is replaced while the loops go on.
    code, report, rows, err = run("recover", "--checkpoint-dir", str(tmp_path / "recover-ckpt"),
                                  "--checkpoint-every", "5", kill_after=10)
    assert code == 0, err[-3000:]
    assert report["restarts_in_place"] == 1 and report["restarts"] == 0, report
    assert [r[1] for r in rows] == ["0", "0"] and all(int(r[2]) >= 10 for r in rows), rows
