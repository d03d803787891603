"""Users' loops in a job with no shard servers (`troupe launch --mode allreduce -- python3
SCRIPT`, Note [A ring of users' loops] in client/kv_member_ring.cpp): three launched
workers over TLS reduce round their own ring. A Horovod script's broadcast_parameters,
DistributedOptimizer, allreduce and allgather, and troupe.torch's DistributedOptimizer,
keep the workers bitwise equal through training on different data, with the pieces in
shared-memory ring mailboxes, on bulk lanes (as between hosts) and in the messages alike;
keys are refused
saying why; a worker that dies ends the job at once, naming it; the flags a ring cannot
take are refused before anything starts."""
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch")

TROUPE = os.environ.get("TROUPE_BIN", "troupe")


def launch(tmp_path, script, *flags, workers=3, timeout=240):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    return subprocess.run([TROUPE, "launch", "--local", "--workers", str(workers), "--mode", "allreduce", "--metrics",
                           "off", "--job-dir", str(tmp_path / "job"), *flags, "--", sys.executable, str(path)],
                          capture_output=True, text=True, timeout=timeout, env=os.environ)


HOROVOD_AND_TORCH = """
        import hashlib, os, sys, numpy as np, torch, troupe, troupe.horovod as hvd, troupe.torch as tt
        hvd.init()
        kv = hvd._kv_store()
        torch.manual_seed(hvd.rank())                  # different on purpose
        def net():
            return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        a, b = net(), net()
        hvd.broadcast_parameters(a.state_dict(), root_rank=0)
        tt.broadcast_parameters(b, kv)
        opt_a = hvd.DistributedOptimizer(torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9))
        opt_b = tt.DistributedOptimizer(torch.optim.Adam(b.parameters(), lr=0.01), b.named_parameters(), kv)
        g = torch.Generator().manual_seed(10 + hvd.rank())   # each worker its own data
        for step in range(6):
            x, y = torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)
            for model, opt in ((a, opt_a), (b, opt_b)):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
        ranks = hvd.allgather(torch.full((hvd.rank() + 1, 2), float(hvd.rank())))
        total = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum)
        try:
            kv.push('w', np.zeros(2, np.float32))
            refused = 'no'
        except troupe.Error as e:
            refused = e.code if '--mode allreduce' in str(e) else str(e)
        bits = b''.join(p.detach().numpy().tobytes() for m in (a, b) for p in m.parameters())
        # One write, so that the library's log lines on the same pipe cannot split it.
        fields = ('RESULT', hvd.rank(), kv.mode, tuple(ranks.shape), float(ranks.sum()), float(total), refused,
                  hashlib.sha256(bits).hexdigest())
        sys.stdout.flush()
        os.write(1, (' '.join(map(str, fields)) + '\\n').encode())
        hvd.shutdown()
    """


def ring_results(p):
    assert p.returncode == 0, p.stderr[-3000:]
    rows = sorted(re.findall(r"RESULT (\d) (\w+) (\(\d+, \d+\)) (\S+) (\S+) (\w+) (\w+)", p.stderr))
    assert [r[0] for r in rows] == ["0", "1", "2"], p.stderr[-3000:]
    for r in rows:
        # 0 + 2 * 1 + 3 * 2 * 2 = 16 in the gathered (6, 2) rows; ranks sum to 3; keys refused.
        assert r[1:6] == ("allreduce", "(6, 2)", "16.0", "3.0", "bad_job"), r
    assert rows[0][6] == rows[1][6] == rows[2][6]  # bitwise the same parameters everywhere
    assert "0 shards" in p.stderr
    return rows[0][6]


def test_a_horovod_script_and_troupe_torch_train_round_the_ring(tmp_path):
    # On one host the pieces go through ring mailboxes in shared memory; without it, on
    # bulk lanes as between hosts (Note [Ring lanes]), and without those in the messages;
    # all give the same bits.
    p = launch(tmp_path, HOROVOD_AND_TORCH)
    in_mailboxes = ring_results(p)
    assert len(re.findall(r"passes the ring's pieces to worker \d through shared memory", p.stderr)) == 3, \
        p.stderr[-3000:]
    assert len(re.findall(r"takes the ring's pieces from worker \d through shared memory", p.stderr)) == 3
    (tmp_path / "lanes").mkdir()
    q = launch(tmp_path / "lanes", HOROVOD_AND_TORCH, "--no-shared-memory")
    assert "through shared memory" not in q.stderr
    assert len(re.findall(r"worker \d: sends its ring pieces to worker \d over a bulk lane", q.stderr)) == 3, \
        q.stderr[-3000:]
    assert ring_results(q) == in_mailboxes
    (tmp_path / "messages").mkdir()
    m = launch(tmp_path / "messages", HOROVOD_AND_TORCH, "--no-shared-memory", "--no-bulk-lanes")
    assert "bulk lane" not in m.stderr
    assert ring_results(m) == in_mailboxes


def test_a_worker_that_dies_ends_the_ring_job_at_once_naming_it(tmp_path):
    start = time.monotonic()
    p = launch(tmp_path, """
        import os, numpy as np, troupe.kv
        kv = troupe.kv.create('dist_allreduce', timeout=120)
        x = np.ones(1000, np.float32)
        for step in range(100000):
            kv.allreduce(x, out=x)
            x[:] = 1
            if kv.rank == 1 and step == 3:
                os._exit(3)
    """, "--max-restarts", "0")
    took = time.monotonic() - start
    assert p.returncode != 0
    assert "worker 1" in p.stderr, p.stderr[-3000:]
    assert took < 60, f"the job took {took:.0f} s to end; the store's timeout is 120 s"


@pytest.mark.parametrize("flags, says", [
    (["--servers", "2"], "no shard servers"),
    (["--checkpoint-dir", "CKPT", "--checkpoint-every", "5"], "save them from the loop"),
    (["--min-workers", "2"], "cannot go on without a worker"),
])
def test_what_a_ring_of_users_loops_cannot_take_is_refused_before_the_start(tmp_path, flags, says):
    flags = [str(tmp_path / "ckpt") if f == "CKPT" else f for f in flags]
    p = launch(tmp_path, "raise SystemExit('the job should not have started')\n", *flags, timeout=60)
    assert p.returncode != 0
    assert says in p.stderr, p.stderr[-2000:]
    assert "should not have started" not in p.stderr
