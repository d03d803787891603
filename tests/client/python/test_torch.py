"""Tests for troupe.torch (client/python/troupe/torch.py): the DistributedOptimizer with one
worker in sync matches a plain PyTorch run, also under a learning-rate scheduler; two workers in threads, each on half of every
batch, match one process on the whole batch (sync averages); update_on_kvstore=False
steps the wrapped optimizer on the averaged gradient; broadcast_parameters gives every
worker rank 0's values; every gradient bucket size gives bitwise the same sync result, and
step() pushes a bucket that backward left incomplete; a step that times out leaves the
next one clean; unsupported optimizers and bucket sizes are refused with a message.
allreduce_gradients (Horovod's way) averages two workers' gradients as one process on the
whole batch would, bitwise the same with and without tensor fusion, in fewer calls.
backward_passes_per_step pushes the sum of a step's passes (two workers on two quarter
passes each match one process on the whole batch), and refuses a step or zero_grad too
early and a pass too many, keeping what was accumulated."""
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import troupe  # noqa: E402
import troupe.torch as tt  # noqa: E402


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def batches(steps, rows=12):
    g = torch.Generator().manual_seed(5)
    return [(torch.randn(rows, 8, generator=g), torch.randint(0, 3, (rows,), generator=g)) for _ in range(steps)]


def on_two_threads(run):
    """run(0) and run(1), each on a thread of its own (two workers of a local group)."""
    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def reference(make_opt, steps):
    model = make_model(1)
    opt = make_opt(model.parameters())
    for x, y in batches(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def train(kv, make_opt, steps, part=None, update_on_kvstore=True, model=None, **wrap):
    model = model if model is not None else make_model(1)
    tt.broadcast_parameters(model, kv)
    opt = tt.DistributedOptimizer(make_opt(model.parameters()), model.named_parameters(), kv,
                                  update_on_kvstore=update_on_kvstore, **wrap)
    for x, y in batches(steps):
        if part is not None:
            x, y = x[part], y[part]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    lambda ps: torch.optim.Adam(ps, lr=0.01),
    lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
], ids=["sgd", "nesterov", "adam", "adamw"])
def test_one_worker_in_sync_matches_plain_pytorch(make_opt):
    expect = reference(make_opt, 6)
    got = train(troupe.kv.create("local"), make_opt, 6)
    for e, g in zip(expect, got):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_a_learning_rate_scheduler_drives_the_shards():
    # StepLR halves the lr every 2 steps; the shards must follow it, keeping the momentum.
    def run(kv):
        model = make_model(1)
        inner = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
        opt = inner
        if kv is not None:
            tt.broadcast_parameters(model, kv)
            opt = tt.DistributedOptimizer(inner, model.named_parameters(), kv)
        sched = torch.optim.lr_scheduler.StepLR(inner, step_size=2, gamma=0.5)
        for x, y in batches(7):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            sched.step()
        return [p.detach().clone() for p in model.parameters()]
    expect, got = run(None), run(troupe.kv.create("local"))
    for e, g in zip(expect, got):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    # Without following the scheduler the result differs: the check can fail.
    frozen = reference(lambda ps: torch.optim.SGD(ps, lr=0.2, momentum=0.9), 7)
    assert not all(torch.allclose(f, e, rtol=1e-5, atol=1e-6) for f, e in zip(frozen, expect))


def test_two_workers_on_half_batches_match_one_on_the_whole_batch():
    make_opt = lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)  # noqa: E731
    expect = reference(make_opt, 5)
    stores = troupe.kv.create_local_group(2, mode="sync")
    results = [None, None]
    models = [make_model(1), make_model(1)]  # here: torch.manual_seed is global, threads would race on it

    def run(r):
        results[r] = train(stores[r], make_opt, 5, part=slice(6 * r, 6 * r + 6), model=models[r])

    on_two_threads(run)
    for r in range(2):
        for e, g in zip(expect, results[r]):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def two_workers(make_opt, steps, **wrap):
    stores = troupe.kv.create_local_group(2, mode="sync")
    results = [None, None]
    models = [make_model(1), make_model(1)]

    def run(r):
        results[r] = train(stores[r], make_opt, steps, part=slice(6 * r, 6 * r + 6), model=models[r], **wrap)

    on_two_threads(run)
    return results


class CountingStore:
    """A store that counts the pushes it is asked for."""

    def __init__(self, kv):
        self._kv, self.pushes = kv, 0

    def push(self, *args, **kwargs):
        self.pushes += 1
        return self._kv.push(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._kv, name)


def test_every_bucket_size_gives_bitwise_the_same_sync_result_with_fewer_pushes():
    make_opt = lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)  # noqa: E731
    alone = two_workers(make_opt, 4, bucket_bytes=0)
    for size in (1, 200, 1 << 20):  # a bucket per parameter, two buckets, one bucket
        bucketed = two_workers(make_opt, 4, bucket_bytes=size)
        for r in range(2):
            for a, b in zip(alone[r], bucketed[r]):
                assert torch.equal(a, b), f"bucket_bytes={size}, worker {r}"
    counts = {}
    for size in (0, 200, 1 << 20):
        kv = CountingStore(troupe.kv.create("local"))
        train(kv, make_opt, 3, bucket_bytes=size)
        counts[size] = kv.pushes
    # Linear(8, 16) and Linear(16, 3): 4 parameters; 200 bytes cut them into
    # [bias 3, weight 48 floats] and [bias 16, weight 128 floats].
    assert counts == {0: 12, 200: 6, 1 << 20: 3}


def test_step_pushes_a_bucket_that_backward_left_incomplete():
    # In async a parameter may go without a gradient; the rest of its bucket still goes.
    torch.manual_seed(3)
    model = torch.nn.ModuleDict({"used": torch.nn.Linear(4, 2), "unused": torch.nn.Linear(4, 2)})
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    kv = troupe.kv.create("local", mode="async")
    tt.broadcast_parameters(model, kv)
    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5), model.named_parameters(), kv)
    opt.zero_grad()
    model["used"](torch.ones(3, 4)).sum().backward()
    opt.step()
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]) == n.startswith("unused"), n


def test_a_step_that_times_out_leaves_the_next_step_clean():
    w0, w1 = troupe.kv.create_local_group(2, mode="sync", timeout=0.3)  # w1 never pushes
    model = make_model(1)
    for name, p in model.named_parameters():
        w0.init(name, p.data)
    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(), w0)
    (x, y), = batches(1)
    for _ in range(2):  # the second backward must not find the first step's gradients pending
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        with pytest.raises(troupe.Error) as e:
            opt.step()  # the round waits for worker 1
        assert e.value.code == "timed_out"


def test_a_bad_bucket_size_is_refused_with_a_message():
    model = make_model(1)
    kv = troupe.kv.create("local")
    for bad in (-1, 2.5, "1MB", True):
        with pytest.raises(troupe.Error, match="bucket_bytes must be a whole number"):
            tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(), kv,
                                    bucket_bytes=bad)


def test_update_on_the_worker_steps_the_wrapped_optimizer():
    make_opt = lambda ps: torch.optim.RMSprop(ps, lr=0.01)  # noqa: E731
    expect = reference(make_opt, 4)
    got = train(troupe.kv.create("local"), make_opt, 4, update_on_kvstore=False)
    for e, g in zip(expect, got):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_broadcast_gives_every_worker_rank_zeros_values():
    stores = troupe.kv.create_local_group(2, mode="sync")
    models = [make_model(10), make_model(20)]
    threads = [threading.Thread(target=tt.broadcast_parameters, args=(models[r], stores[r])) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        assert torch.equal(a, b)


def _horovod_style(stores, fusion_bytes, steps=4):
    """Each worker trains on its half of every batch with its own SGD, averaging the
    gradients with allreduce_gradients; the models and the calls per step, by rank."""
    models = [make_model(1) for _ in stores]
    calls = [[] for _ in stores]

    def worker(r):
        opt = torch.optim.SGD(models[r].parameters(), lr=0.1, momentum=0.9)
        for x, y in batches(steps):
            half = slice(0, 6) if r == 0 else slice(6, 12)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(models[r](x[half]), y[half]).backward()
            calls[r].append(tt.allreduce_gradients(models[r], stores[r], fusion_bytes=fusion_bytes))
            opt.step()

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return [[p.detach().clone() for p in m.parameters()] for m in models], calls


def test_allreduce_gradients_averages_like_one_process_and_fusion_changes_no_bit():
    fused, fused_calls = _horovod_style(troupe.kv.create_local_group(2), fusion_bytes=64 << 20)
    alone, alone_calls = _horovod_style(troupe.kv.create_local_group(2), fusion_bytes=0)
    assert fused_calls == [[1] * 4, [1] * 4]  # 4 small tensors: one buffer
    assert alone_calls == [[4] * 4, [4] * 4]  # no fusion: one call per parameter
    for a, b, c, d in zip(fused[0], fused[1], alone[0], alone[1]):
        assert torch.equal(a, b) and torch.equal(a, c) and torch.equal(a, d)
    # Two halves averaged are one whole batch (cross_entropy's mean), up to float rounding.
    for got, want in zip(fused[0], reference(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), 4)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(troupe.Error) as e:
        tt.allreduce_gradients(make_model(1), troupe.kv.create("local"), fusion_bytes=-1)
    assert e.value.code == "bad_job"
    # The groups are Note [Tensor fusion]'s, from the C++ core: consecutive, at most 20
    # bytes (5 floats) each, a larger tensor alone.
    assert troupe._troupe.plan_fusion([3, 2, 5, 1, 9, 0], 20) == [(0, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
    assert troupe._troupe.plan_fusion([3, 2, 5, 1], 0) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    with pytest.raises(troupe.Error) as e:
        troupe._troupe.plan_fusion([1], -4)
    assert e.value.code == "bad_job"


def test_unsupported_setups_are_refused_with_a_message():
    model = make_model(1)
    kv = troupe.kv.create("local")
    with pytest.raises(troupe.Error, match="RMSprop cannot run on the shards"):
        tt.DistributedOptimizer(torch.optim.RMSprop(model.parameters()), model.named_parameters(), kv)
    akv = troupe.kv.create("local", mode="async")
    with pytest.raises(troupe.Error, match="needs a sync store"):
        tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(), akv,
                                update_on_kvstore=False)


@pytest.mark.parametrize("warmup", [0, 5])
def test_an_async_push_is_a_workers_share_and_warms_up(warmup):
    # Note [Asynchrony in a user's loop]: of two async workers, one's step moves the
    # parameters by half its gradient at the lr, warmed up over the first `warmup` steps of
    # each worker (the shards count 2 updates a step): lr * (0.1 + 0.9 * 1 / 10) at first.
    w0, w1 = troupe.kv.create_local_group(2, mode="async")
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    for name, p in model.named_parameters():
        w0.init(name, p.data)
    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.4), model.named_parameters(), w0,
                                  async_warmup_steps=warmup)
    opt.zero_grad()
    model(torch.full((1, 1), 2.0)).sum().backward()  # gradient 2
    opt.step()
    lr = 0.4 * ((0.1 + 0.9 * 1 / (warmup * 2)) if warmup else 1.0)
    assert model.weight.item() == pytest.approx(1.0 - lr * 2.0 / 2, rel=1e-6)
    with pytest.raises(troupe.Error, match="async_warmup_steps must be a whole number"):
        tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.4), model.named_parameters(), w0,
                                async_warmup_steps=-1)


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_weight_decay_is_a_workers_share_too(mode):
    # Note [Asynchrony in a user's loop]: an async push carries 1/N of the whole update,
    # weight decay included, so N pushes decay the parameters as much as one sync round.
    # Alone in a job of 2 (sync would wait for the other), one async step at lr 0.5 with
    # decay 0.2 on a zero gradient moves weight 1 by 0.5 * 0.2 / 2; in sync the decay goes
    # to the shards whole (the round applies it once).
    kvs = troupe.kv.create_local_group(2, mode=mode)
    w0 = kvs[0]
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    for name, p in model.named_parameters():
        w0.init(name, p.data)
    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5, weight_decay=0.2),
                                  model.named_parameters(), w0, async_warmup_steps=0)
    assert opt._sent["weight_decay"] == pytest.approx(0.1 if mode == "async" else 0.2)
    if mode == "sync":
        return
    opt.zero_grad()
    model(torch.zeros((1, 1))).sum().backward()  # gradient 0: only the decay moves it
    opt.step()
    assert model.weight.item() == pytest.approx(1.0 - 0.5 * 0.2 / 2, rel=1e-6)


def test_backward_passes_per_step_pushes_the_sum_of_the_passes():
    # Two workers, each on half of every batch in two passes of a quarter (the loss halved,
    # as an accumulating loop scales it), match one process on the whole batch: every
    # bucket is pushed from backward, after its parameters' second pass.
    make_opt = lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)  # noqa: E731
    expect = reference(make_opt, 4)
    stores = troupe.kv.create_local_group(2, mode="sync")
    results = [None, None]
    models = [make_model(1), make_model(1)]

    def run(r):
        model = models[r]
        tt.broadcast_parameters(model, stores[r])
        opt = tt.DistributedOptimizer(make_opt(model.parameters()), model.named_parameters(), stores[r],
                                      bucket_bytes=0, backward_passes_per_step=2)
        for x, y in batches(4):
            opt.zero_grad()
            for rows in (slice(6 * r, 6 * r + 3), slice(6 * r + 3, 6 * r + 6)):
                (torch.nn.functional.cross_entropy(model(x[rows]), y[rows]) / 2).backward()
            opt.step()
        results[r] = [p.detach().clone() for p in model.parameters()]

    on_two_threads(run)
    for r in range(2):
        for e, g in zip(expect, results[r]):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_backward_passes_per_step_refuses_a_step_or_zero_grad_too_early_and_a_pass_too_many():
    model = make_model(1)
    kv = troupe.kv.create("local")
    tt.broadcast_parameters(model, kv)
    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(), kv,
                                  backward_passes_per_step=2)
    x, y = batches(1)[0]
    before = [p.detach().clone() for p in model.parameters()]
    torch.nn.functional.cross_entropy(model(x), y).backward()
    with pytest.raises(troupe.Error) as e:
        opt.step()
    assert e.value.code == "bad_job" and "after 1 of backward_passes_per_step=2" in str(e.value), str(e.value)
    with pytest.raises(troupe.Error) as e:
        opt.zero_grad()
    assert e.value.code == "bad_job" and "would drop" in str(e.value)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    with pytest.raises(troupe.Error) as e:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    assert e.value.code == "duplicate" and "backward_passes_per_step=2" in str(e.value), str(e.value)
    with pytest.raises(troupe.Error) as e:
        tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(), kv,
                                backward_passes_per_step=0)
    assert e.value.code == "bad_job" and "whole number >= 1" in str(e.value)
