"""Tests for troupe.horovod (client/python/troupe/horovod.py): a Horovod script's calls
run alone (a one-worker local store) and as two launched workers over TLS, where
broadcast_parameters and broadcast_optimizer_state make the workers equal, the
DistributedOptimizer keeps them equal through training on different data, and allreduce
averages a metric; calls before init() and step(closure) are refused with troupe.Error.
The *_async calls: handles synchronized in any order, errors raised by synchronize, a
handle used twice refused; the DistributedOptimizer's groups start during backward and
end bitwise where troupe.torch.allreduce_gradients does; bad groupings and dtypes are
refused. backward_passes_per_step: alone it steps as plain PyTorch's accumulation, and two
ringed workers (through troupe.horovod and troupe.torch) end where one process on all the
data does; a step or zero_grad too early, a pass too many and a bad count are refused.
local_rank, local_size, cross_rank and cross_size: alone and in a launch on one host.
broadcast_optimizer_state: a fresh optimizer makes its state and moves no parameter, and
a fresh worker with other options takes a trained one's options, moments and steps.
grouped_allreduce (new, in place, async), broadcast_object, allgather_object and barrier
alone and with two launched workers, round the ring and through a shard."""
import os
import re

import pytest

torch = pytest.importorskip("torch")
import troupe  # noqa: E402
import troupe.horovod as hvd  # noqa: E402
from launching import launched  # noqa: E402


def test_alone_the_calls_are_those_of_one_worker_and_steps_match_plain_pytorch(monkeypatch):
    for k in [k for k in os.environ if k.startswith("TROUPE_")]:
        monkeypatch.delenv(k)
    with pytest.raises(troupe.Error) as e:
        hvd.rank()
    assert e.value.code == "bad_job"
    hvd.init()
    try:
        assert hvd.is_initialized() and hvd.rank() == 0 and hvd.size() == 1
        assert (hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size()) == (0, 1, 0, 1)
        monkeypatch.setenv("TROUPE_LOCAL_RANK", "first")
        with pytest.raises(troupe.Error) as e:
            hvd.local_rank()
        assert e.value.code == "bad_job" and "TROUPE_LOCAL_RANK is 'first'" in str(e.value)
        monkeypatch.delenv("TROUPE_LOCAL_RANK")
        monkeypatch.setenv("TROUPE_COORDINATOR", "127.0.0.1:9")  # as if launched, without launch's locality
        with pytest.raises(troupe.Error) as e:
            hvd.cross_size()
        assert e.value.code == "bad_job" and "TROUPE_CROSS_SIZE is not set" in str(e.value)
        monkeypatch.delenv("TROUPE_COORDINATOR")
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
    p = launched(tmp_path, """
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
        where = (hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size())
        import os
        os.write(1, f"LOCALITY {hvd.rank()} {where}\\n".encode())
        hvd.shutdown()
    """, "--servers", "2")
    rows = sorted(re.findall(r"RESULT (\d) (\d) (-?[0-9.]+) ([0-9.]+)", p.stderr))
    assert [r[:2] for r in rows] == [("0", "2"), ("1", "2")], p.stderr[-3000:]
    assert rows[0][2:] == rows[1][2:]  # the same parameters and the same averaged loss
    # One host: every worker is local, and the host is the only one.
    where = sorted(re.findall(r"LOCALITY (\d) (\(.*\))", p.stdout + p.stderr))
    assert where == [("0", "(0, 2, 0, 1)"), ("1", "(1, 2, 0, 1)")], p.stderr[-3000:]


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
    p = launched(tmp_path, """
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
    """, "--servers", "2")
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


def test_alone_backward_passes_per_step_steps_as_plain_pytorch_accumulation(monkeypatch):
    for k in [k for k in os.environ if k.startswith("TROUPE_")]:
        monkeypatch.delenv(k)
    hvd.init()
    try:
        torch.manual_seed(4)
        a, b = torch.nn.Linear(4, 2), torch.nn.Linear(4, 2)
        b.load_state_dict(a.state_dict())
        plain = torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9)
        wrapped = hvd.DistributedOptimizer(torch.optim.SGD(b.parameters(), lr=0.1, momentum=0.9),
                                           named_parameters=b.named_parameters(), backward_passes_per_step=3,
                                           fusion_bytes=0)  # each gradient's call starts from backward
        g = torch.Generator().manual_seed(6)
        for _ in range(2):
            parts = [torch.randn(5, 4, generator=g) for _ in range(3)]
            for model, opt in ((a, plain), (b, wrapped)):
                opt.zero_grad()
                for x in parts:  # autograd sums the three passes; nothing divides them
                    model(x).square().mean().backward()
                opt.step()
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p, q)
        # A step after 2 of the 3 passes raises and keeps them: a third pass, then step, works.
        before = [p.detach().clone() for p in b.parameters()]
        wrapped.zero_grad()
        for _ in range(2):
            b(torch.ones(2, 4)).sum().backward()
        with pytest.raises(troupe.Error) as e:
            wrapped.step()
        assert e.value.code == "bad_job" and "after 2 of backward_passes_per_step=3" in str(e.value), str(e.value)
        assert all(torch.equal(p, q) for p, q in zip(b.parameters(), before))
        with pytest.raises(troupe.Error) as e:  # zero_grad would drop the two passes
            wrapped.zero_grad()
        assert e.value.code == "bad_job" and "zero_grad()" in str(e.value)
        b(torch.ones(2, 4)).sum().backward()
        with pytest.raises(troupe.Error) as e:  # a fourth pass before step
            b(torch.ones(2, 4)).sum().backward()
        assert e.value.code == "duplicate" and "backward_passes_per_step=3" in str(e.value), str(e.value)
    finally:
        hvd.shutdown()


def test_backward_passes_per_step_is_a_whole_number_of_at_least_one():
    model = torch.nn.Linear(3, 2)
    for bad in (0, -2, True, 1.5, "2"):
        with pytest.raises(troupe.Error) as e:
            hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), backward_passes_per_step=bad)
        assert e.value.code == "bad_job" and "backward_passes_per_step" in str(e.value), str(e.value)


def test_two_ringed_workers_accumulate_passes_as_one_process_on_all_the_data(tmp_path):
    # Each worker runs 2 passes of 4 rows per step (its loss halved, as an accumulating loop
    # scales it) through troupe.horovod and through troupe.torch; the ring averages the
    # summed passes, so both end where one process on the step's 16 rows does.
    p = launched(tmp_path, """
        import copy, os, torch, troupe.horovod as hvd, troupe.kv, troupe.torch as tt
        kv = troupe.kv.create("dist")
        hvd.init(store=kv)
        torch.manual_seed(0)
        ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        a, b = copy.deepcopy(ref), copy.deepcopy(ref)
        ring = hvd.DistributedOptimizer(torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9),
                                        named_parameters=a.named_parameters(), backward_passes_per_step=2,
                                        num_groups=2)  # the first group's call starts from backward
        shards_free = tt.DistributedOptimizer(torch.optim.SGD(b.parameters(), lr=0.1, momentum=0.9),
                                              b.named_parameters(), kv, backward_passes_per_step=2)
        plain = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        gens = [torch.Generator().manual_seed(10 + r) for r in range(2)]
        ce = torch.nn.functional.cross_entropy
        for step in range(3):
            data = [(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)) for g in gens]
            x, y = data[hvd.rank()]
            for model, opt in ((a, ring), (b, shards_free)):
                opt.zero_grad()
                for half in (slice(0, 4), slice(4, 8)):
                    (ce(model(x[half]), y[half]) / 2).backward()
                opt.step()
            plain.zero_grad()
            ce(ref(torch.cat([d[0] for d in data])), torch.cat([d[1] for d in data])).backward()
            plain.step()
        close = all(torch.allclose(p, q, rtol=1e-5, atol=1e-6) and torch.allclose(p, r, rtol=1e-5, atol=1e-6)
                    for p, q, r in zip(ref.parameters(), a.parameters(), b.parameters()))
        os.write(1, f"RESULT {hvd.rank()} {close}\\n".encode())
        hvd.shutdown()
    """, "--servers", "0", "--mode", "allreduce")
    results = sorted(re.findall(r"RESULT (\d) (\w+)", p.stdout + p.stderr))
    assert results == [("0", "True"), ("1", "True")], p.stdout[-2000:] + p.stderr[-2000:]


def test_alone_broadcast_optimizer_state_makes_a_fresh_state_and_moves_nothing(monkeypatch):
    for k in [k for k in os.environ if k.startswith("TROUPE_")]:
        monkeypatch.delenv(k)
    hvd.init()
    try:
        torch.manual_seed(5)
        model = torch.nn.Linear(4, 3)
        before = [p.detach().clone() for p in model.parameters()]
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)
        hvd.broadcast_optimizer_state(hvd.DistributedOptimizer(opt), root_rank=0)
        assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
        assert all(p.grad is None for p in model.parameters())
        assert all("momentum_buffer" in opt.state[p] for p in model.parameters())
        group = opt.param_groups[0]
        assert (group["lr"], group["momentum"], group["weight_decay"], group["nesterov"]) == (0.1, 0.9, 0.01, True)
        assert isinstance(group["nesterov"], bool)
        with pytest.raises(troupe.Error) as e:
            hvd.broadcast_optimizer_state(object(), root_rank=0)
        assert e.value.code == "bad_job" and "torch optimizer" in str(e.value)
        with pytest.raises(troupe.Error) as e:
            hvd.broadcast_optimizer_state(torch.optim.LBFGS(model.parameters()), root_rank=0)
        assert e.value.code == "bad_job" and "LBFGS" in str(e.value) and "parameters only" in str(e.value)
    finally:
        hvd.shutdown()


def test_broadcast_optimizer_state_brings_a_fresh_worker_to_a_trained_ones_state_and_options(tmp_path):
    # Worker 0 trained and changed its options (as one that loaded a checkpoint); worker 1
    # is fresh, with other options. After the broadcast both hold worker 0's moments, step
    # counts and options, bit for bit, and their next steps agree.
    p = launched(tmp_path, """
        import os, torch, troupe.horovod as hvd
        hvd.init()
        torch.manual_seed(0)
        model = torch.nn.Linear(5, 2)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        if hvd.rank() == 0:
            opt = torch.optim.Adam(model.parameters(), lr=0.0123, betas=(0.85, 0.9991), amsgrad=True)
            for step in range(3):
                opt.zero_grad()
                model(torch.randn(4, 5)).square().mean().backward()
                opt.step()
        else:
            opt = torch.optim.Adam(model.parameters(), lr=0.5, betas=(0.9, 0.999), amsgrad=False)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        g = opt.param_groups[0]
        options = (g["lr"].hex(), g["betas"][0].hex(), g["betas"][1].hex(), g["amsgrad"])
        moments = sum(float(v.double().sum()) for s in opt.state.values() for v in s.values() if v.numel() > 1)
        steps = [float(s["step"]) for s in opt.state.values()]
        opt.zero_grad()
        model(torch.ones(4, 5)).square().mean().backward()
        opt.step()
        checksum = sum(float(p.double().sum()) for p in model.parameters())
        os.write(1, f"RESULT {hvd.rank()} {options} {moments:.12f} {steps} {checksum:.12f}\\n".encode())
        hvd.shutdown()
    """, "--servers", "0", "--mode", "allreduce")
    rows = sorted(re.findall(r"RESULT (\d) (.*)", p.stdout + p.stderr))
    assert [r[0] for r in rows] == ["0", "1"], p.stdout[-2000:] + p.stderr[-2000:]
    assert rows[0][1] == rows[1][1], rows
    assert "'0x1.930be0ded288dp-7'" in rows[0][1] and "True" in rows[0][1] and "[3.0, 3.0]" in rows[0][1], rows


def test_alone_grouped_allreduce_objects_and_barrier_are_one_workers(monkeypatch):
    for k in [k for k in os.environ if k.startswith("TROUPE_")]:
        monkeypatch.delenv(k)
    hvd.init()
    try:
        a, b = torch.arange(6, dtype=torch.float32).reshape(2, 3), torch.tensor([-1.5, 2.0])
        got = hvd.grouped_allreduce([a, b], op=hvd.Sum)
        assert torch.equal(got[0], a) and torch.equal(got[1], b) and got[0] is not a
        assert hvd.grouped_allreduce_([a, b])[0] is a
        assert [torch.equal(x, y) for x, y in zip(hvd.synchronize(hvd.grouped_allreduce_async([a, b])), [a, b])] == \
            [True, True]
        assert hvd.grouped_allreduce([]) == []
        with pytest.raises(troupe.Error) as e:
            hvd.grouped_allreduce([a, torch.ones(2, dtype=torch.float64)])
        assert e.value.code == "bad_dtype"
        obj = {"step": 7, "bytes": b"\xff\xff\xff\x7f\x01\x00\x80\x7f", "nested": [1.5, None]}
        assert hvd.broadcast_object(obj) == obj
        assert hvd.allgather_object(obj) == [obj]
        hvd.barrier()
    finally:
        hvd.shutdown()


@pytest.mark.parametrize("flags", [["--mode", "allreduce", "--servers", "0"], ["--servers", "1"]],
                         ids=["ring", "shards"])
def test_two_launched_workers_share_objects_and_grouped_reductions(tmp_path, flags):
    # Rank 1 broadcasts an object whose pickle holds NaN-shaped words; each rank gathers
    # an object of its own size; a grouped Min and a grouped Sum in place; a barrier.
    p = launched(tmp_path, """
        import os, torch, troupe.horovod as hvd
        hvd.init()
        r = hvd.rank()
        secret = {"words": b"\\xff\\xff\\xff\\x7f\\x01\\x00\\x80\\x7f" * 3, "from": r}
        got = hvd.broadcast_object(secret if r == 1 else None, root_rank=1)
        everyone = hvd.allgather_object("x" * (5 + 7 * r))
        a, b = torch.full((2, 2), float(r + 1)), torch.tensor([float(10 * r), -1.0])
        least = hvd.grouped_allreduce([a, b], op=hvd.Min)
        hvd.grouped_allreduce_([a, b], op=hvd.Sum)
        hvd.barrier()
        ok = (got == {"words": b"\\xff\\xff\\xff\\x7f\\x01\\x00\\x80\\x7f" * 3, "from": 1}
              and everyone == ["x" * 5, "x" * 12]
              and torch.equal(least[0], torch.ones(2, 2)) and torch.equal(least[1], torch.tensor([0.0, -1.0]))
              and torch.equal(a, torch.full((2, 2), 3.0)) and torch.equal(b, torch.tensor([10.0, -2.0])))
        os.write(1, f"RESULT {r} {ok}\\n".encode())
        hvd.shutdown()
    """, *flags)
    results = sorted(re.findall(r"RESULT (\d) (\w+)", p.stdout + p.stderr))
    assert results == [("0", "True"), ("1", "True")], p.stdout[-2000:] + p.stderr[-2000:]
