"""Tests for troupe.horovod (client/python/troupe/horovod.py): a Horovod script's calls
run alone (a one-worker local store) and as two launched workers over TLS, where
broadcast_parameters and broadcast_optimizer_state make the workers equal, the
DistributedOptimizer keeps them equal through training on different data, and allreduce
averages a metric; calls before init() and step(closure) are refused with troupe.Error.
The *_async calls: handles synchronized in any order, errors raised by synchronize, a
handle used twice refused; the DistributedOptimizer's groups start during backward and
end bitwise where troupe.torch.allreduce_gradients does; bad groupings and dtypes are
refused."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
import troupe  # noqa: E402
import troupe.horovod as hvd  # noqa: E402

TROUPE = os.environ.get("TROUPE_BIN", "troupe")


def test_alone_the_calls_are_those_of_one_worker_and_steps_match_plain_pytorch(monkeypatch):
    for k in [k for k in os.environ if k.startswith("TROUPE_")]:
        monkeypatch.delenv(k)
    with pytest.raises(troupe.Error) as e:
        hvd.rank()
    assert e.value.code == "bad_job"
    hvd.init()
    try:
        assert hvd.is_initialized() and hvd.rank() == 0 and hvd.size() == 1
        t = torch.arange(4, dtype=torch.float32)
        assert torch.equal(hvd.allreduce(t), t) and torch.equal(hvd.allreduce(t, op=hvd.Sum), t)
        assert torch.equal(hvd.allgather(t.reshape(2, 2)), t.reshape(2, 2))
        torch.manual_seed(3)
        a, b = torch.nn.Linear(4, 2), torch.nn.Linear(4, 2)
        b.load_state_dict(a.state_dict())
        plain = torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9)
        wrapped = hvd.DistributedOptimizer(torch.optim.SGD(b.parameters(), lr=0.1, momentum=0.9),
                                           named_parameters=b.named_parameters())
        x = torch.randn(8, 4)
        for _ in range(3):
            for model, opt in ((a, plain), (b, wrapped)):
                opt.zero_grad()
                model(x).square().mean().backward()
                opt.step()
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p, q)
        assert wrapped.param_groups[0]["lr"] == 0.1  # the wrapped optimizer's attributes
        with pytest.raises(troupe.Error):
            wrapped.step(closure=lambda: 0.0)
    finally:
        hvd.shutdown()
    assert not hvd.is_initialized()


def test_two_launched_workers_stay_equal_through_training_on_different_data(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import torch, troupe.horovod as hvd
        hvd.init()
        torch.manual_seed(hvd.rank())                  # different on purpose
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        g = torch.Generator().manual_seed(10 + hvd.rank())
        for step in range(5):
            x, y = torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        mean_loss = hvd.allreduce(loss.detach().reshape(1))
        checksum = sum(float(p.double().sum()) for p in model.parameters())
        print('RESULT', hvd.rank(), hvd.size(), f'{checksum:.9f}', f'{mean_loss.item():.6f}', flush=True)
        hvd.shutdown()
    """))
    p = subprocess.run([TROUPE, "launch", "--local", "--workers", "2", "--servers", "2", "--metrics", "off",
                        "--job-dir", str(tmp_path / "job"), "--", sys.executable, str(script)],
                       capture_output=True, text=True, timeout=300, env=os.environ)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = sorted(re.findall(r"RESULT (\d) (\d) (-?[0-9.]+) ([0-9.]+)", p.stderr))
    assert [r[:2] for r in rows] == [("0", "2"), ("1", "2")], p.stderr[-3000:]
    assert rows[0][2:] == rows[1][2:]  # the same parameters and the same averaged loss


def test_async_handles_synchronize_in_any_order_and_carry_their_errors(monkeypatch):
    for k in [k for k in os.environ if k.startswith("TROUPE_")]:
        monkeypatch.delenv(k)
    with pytest.raises(troupe.Error) as e:
        hvd.allreduce_async(torch.ones(2))
    assert e.value.code == "bad_job"
    hvd.init()
    try:
        first = hvd.allreduce_async(torch.ones(3))
        t = torch.full((2,), 2.0)
        second = hvd.allreduce_async_(t, op=hvd.Sum)
        bad = hvd.allreduce_async(torch.tensor([1.0, float("nan")]))
        gathered = hvd.allgather_async(torch.arange(4.0).reshape(2, 2))
        assert hvd.synchronize(second) is t and torch.equal(t, torch.full((2,), 2.0))
        assert hvd.poll(first)  # made before `second`, so done when it is
        assert torch.equal(hvd.synchronize(first), torch.ones(3))
        with pytest.raises(troupe.Error) as e:
            hvd.synchronize(bad)
        assert e.value.code == "not_finite"
        assert torch.equal(hvd.synchronize(gathered), torch.arange(4.0).reshape(2, 2))
        with pytest.raises(troupe.Error) as e:
            hvd.synchronize(first)  # once only
        assert e.value.code == "bad_job" and "synchronized once" in str(e.value)
        assert torch.equal(hvd.allreduce(torch.ones(1)), torch.ones(1))  # a blocking call after them all
    finally:
        hvd.shutdown()


def test_two_workers_overlap_backward_and_end_where_allreduce_gradients_does(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import copy, torch, troupe.horovod as hvd, troupe.torch as tt
        hvd.init()
        torch.manual_seed(0)
        def net():
            return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.ReLU(),
                                       torch.nn.Linear(8, 3))
        a = net(); b = copy.deepcopy(a); c = copy.deepcopy(a)
        grouped = hvd.DistributedOptimizer(torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9), num_groups=3)
        fused_none = hvd.DistributedOptimizer(torch.optim.SGD(c.parameters(), lr=0.1, momentum=0.9), fusion_bytes=0)
        plain = torch.optim.SGD(b.parameters(), lr=0.1, momentum=0.9)
        g = torch.Generator().manual_seed(10 + hvd.rank())   # each worker its own data
        started = []
        for step in range(4):
            x, y = torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)
            for model, opt in ((a, grouped), (c, fused_none)):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                started.append(len(opt._sent))               # calls begun during backward
                opt.step()
            plain.zero_grad()
            torch.nn.functional.cross_entropy(b(x), y).backward()
            tt.allreduce_gradients(b, hvd._kv_store())
            plain.step()
        same = all(torch.equal(p, q) and torch.equal(p, r) for p, q, r in zip(a.parameters(), b.parameters(),
                                                                              c.parameters()))
        checksum = sum(float(p.double().sum()) for p in a.parameters())
        print('RESULT', hvd.rank(), same, started, f'{checksum:.9f}', flush=True)
        hvd.shutdown()
    """))
    p = subprocess.run([TROUPE, "launch", "--local", "--workers", "2", "--servers", "2", "--metrics", "off",
                        "--job-dir", str(tmp_path / "job"), "--", sys.executable, str(script)],
                       capture_output=True, text=True, timeout=300, env=os.environ)
    assert p.returncode == 0, p.stderr[-3000:]
    results = sorted(re.findall(r"RESULT (\d) (\w+) (\[[^]]*\]) (\S+)", p.stdout + p.stderr))
    assert len(results) == 2, p.stdout[-2000:] + p.stderr[-2000:]
    for rank, same, started, _ in results:
        assert same == "True"
        # Every group but the last (of 3, and of 6 without fusion) began in backward.
        assert started == "[2, 5, 2, 5, 2, 5, 2, 5]"
    assert results[0][3] == results[1][3]  # the workers stay equal


def test_distributed_optimizer_refuses_bad_groups_and_dtypes():
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for kwargs, code, words in ((dict(num_groups=-1), "bad_job", "num_groups"),
                                (dict(num_groups=True), "bad_job", "num_groups"),
                                (dict(fusion_bytes=-1), "bad_job", "fusion threshold")):
        with pytest.raises(troupe.Error) as e:
            hvd.DistributedOptimizer(opt, **kwargs)
        assert e.value.code == code and words in str(e.value), str(e.value)
    double = torch.nn.Linear(3, 2).double()
    with pytest.raises(troupe.Error) as e:
        hvd.DistributedOptimizer(torch.optim.SGD(double.parameters(), lr=0.1))
    assert e.value.code == "bad_dtype" and "float32" in str(e.value)
