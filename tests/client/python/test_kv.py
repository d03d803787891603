"""Tests for the troupe Python module's store (client/python/troupe/kv.py and bindings.cpp):
arrays cross without a copy in both directions, torch CPU tensors work like NumPy arrays,
everything else is refused naming the key, dtype and shape; errors of the job arrive as
troupe.Error with their code; Ctrl-C interrupts a wait. Horovod-style collectives
(allreduce, broadcast, broadcast_parameters, allgather) give every worker the same values,
return what they were given (tensors or arrays), and raise troupe.Error when the workers'
calls disagree, the input is wrong, or nobody else makes the call. MXNet's pushpull pushes
and then pulls into out or the pushed arrays; a refused push pulls nothing."""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import troupe


def test_pushpull_pushes_then_pulls_into_out_or_the_value_itself():
    kv = troupe.kv.create("local")
    kv.init(["a", "b"], [np.full(3, 1.0, np.float32), np.full(2, 5.0, np.float32)])
    kv.set_optimizer(lr=0.5)
    out = np.zeros(3, np.float32)
    kv.wait(kv.pushpull("a", np.full(3, 2.0, np.float32), out=out))
    assert (out == 0.0).all()  # 1 - 0.5 * 2
    g = [np.full(3, 1.0, np.float32), np.full(2, -2.0, np.float32)]
    kv.wait(kv.pushpull(["a", "b"], g))  # in place: g now holds the values
    assert (g[0] == -0.5).all() and (g[1] == 6.0).all()
    with pytest.raises(troupe.Error) as e:  # one array per device, nowhere to pull into
        kv.pushpull("a", [np.ones(3, np.float32), np.ones(3, np.float32)])
    assert e.value.code == "bad_shape" and "out=" in str(e.value)
    untouched = np.full(3, 9.0, np.float32)
    with pytest.raises(troupe.Error) as e:  # a push the store refuses: nothing is pulled
        kv.wait(kv.pushpull("a", np.ones(4, np.float32), out=untouched))
    assert e.value.code == "bad_shape" and (untouched == 9.0).all()


def test_pull_writes_into_the_callers_array_and_push_reads_it_in_place():
    kv = troupe.kv.create("local")
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    kv.init("w", w)
    kv.set_optimizer(lr=1.0)
    g = np.ones((2, 3), np.float32)
    kv.wait(kv.push("w", g))
    out = np.zeros((2, 3), np.float32)
    before = out.ctypes.data
    kv.wait(kv.pull("w", out=out))
    assert out.ctypes.data == before
    np.testing.assert_array_equal(out, w - 1)
    # A view into a bigger buffer is written in place, and nothing around it.
    big = np.full((4, 3), 7, np.float32)
    kv.wait(kv.pull("w", out=big[1:3]))
    np.testing.assert_array_equal(big[1:3], w - 1)
    assert (big[0] == 7).all() and (big[3] == 7).all()


def test_torch_cpu_tensors_are_read_and_written_in_place():
    torch = pytest.importorskip("torch")
    kv = troupe.kv.create("local", mode="async")
    p = torch.arange(4, dtype=torch.float32)
    kv.init(0, p)
    kv.set_optimizer(lr=0.5)
    kv.push(0, torch.ones(4))
    kv.wait_all()
    kv.wait(kv.pull(0, out=p))  # straight into the tensor's storage
    assert torch.equal(p, torch.arange(4, dtype=torch.float32) - 0.5)


def test_several_keys_and_a_list_of_values_for_one_key():
    kv = troupe.kv.create("local", servers=2, big_array_bound=4)
    a, b = np.zeros(10, np.float32), np.zeros((3, 2), np.float32)
    kv.init(["a", "b"], [a, b])
    kv.push(["a", "b"], [np.ones(10, np.float32), np.full((3, 2), 2, np.float32)])
    kv.wait_all()
    kv.push("a", [np.ones(10, np.float32), np.full(10, 2, np.float32)])  # one key, two devices: summed
    kv.wait_all()
    outa, outb = np.empty(10, np.float32), np.empty((3, 2), np.float32)
    kv.wait(kv.pull(["a", "b"], out=[outa, outb]))
    np.testing.assert_array_equal(outa, np.full(10, 3, np.float32))  # sync, no optimizer: the round's sum
    np.testing.assert_array_equal(outb, np.full((3, 2), 2, np.float32))


def test_row_sparse_pull_returns_the_rows_asked_for():
    kv = troupe.kv.create("local", mode="async", servers=2, big_array_bound=9)
    emb = np.arange(40, dtype=np.float32).reshape(10, 4)
    kv.init("emb", emb)
    rows = np.array([9, 0, 4, 4], dtype=np.int64)
    out = np.zeros((4, 4), np.float32)
    kv.wait(kv.row_sparse_pull("emb", out=out, row_ids=rows))
    np.testing.assert_array_equal(out, emb[rows])


@pytest.mark.parametrize("bad, what", [
    (np.zeros((2, 3), np.float64), "dtype float64 with shape (2, 3)"),
    (np.zeros((3, 2), np.float32).T, "shape (2, 3) is not C-contiguous"),
    ([[0.0] * 3] * 2, "a list"),
])
def test_what_would_need_a_copy_is_refused_naming_key_dtype_and_shape(bad, what):
    kv = troupe.kv.create("local")
    kv.init("w", np.zeros((2, 3), np.float32))
    with pytest.raises(troupe.Error) as e:
        kv.push("w", bad)
    assert e.value.code == "bad_dtype"
    assert "'w'" in str(e.value) and what in str(e.value)


def test_a_read_only_output_is_refused():
    kv = troupe.kv.create("local")
    kv.init("w", np.zeros(3, np.float32))
    out = np.zeros(3, np.float32)
    out.setflags(write=False)
    with pytest.raises(troupe.Error, match="read-only"):
        kv.pull("w", out=out)


def test_bad_keys_shapes_and_calls_after_close():
    kv = troupe.kv.create("local")
    kv.init("w", np.zeros((2, 2), np.float32))
    with pytest.raises(troupe.Error) as e:
        kv.push("never", np.zeros(2, np.float32))
    assert e.value.code == "no_such_key" and '"never"' in str(e.value)
    with pytest.raises(troupe.Error) as e:
        kv.push("w", np.zeros(4, np.float32))
    assert e.value.code == "bad_shape" and "(2, 2)" in str(e.value) and "(4,)" in str(e.value)
    with pytest.raises(troupe.Error) as e:
        kv.init("w", np.zeros(4, np.float32))
    assert e.value.code == "bad_shape"
    with pytest.raises(troupe.Error) as e:
        kv.init("bad\udcff", np.zeros(1, np.float32))
    assert e.value.code == "malformed" and "UTF-8" in str(e.value)
    with pytest.raises(troupe.Error) as e:
        kv.push("w", np.array([[1, np.nan], [0, 0]], np.float32))
    assert e.value.code == "not_finite"
    with pytest.raises(troupe.Error):
        troupe.kv.create("dist_nowhere")
    kv.close()
    with pytest.raises(troupe.Error) as e:
        kv.pull("w", out=np.zeros((2, 2), np.float32))
    assert e.value.code == "closed"


def test_a_sync_pull_nobody_completes_times_out_as_an_exception_and_lets_go_of_its_array():
    w0, w1 = troupe.kv.create_local_group(2, mode="sync", timeout=1.0)
    w0.init("w", np.zeros(1, np.float32))
    w0.push("w", np.ones(1, np.float32))
    out = np.zeros(1, np.float32)
    h = w0.pull("w", out=out)
    t = time.monotonic()
    with pytest.raises(troupe.Error) as e:
        w0.wait(h)
    assert e.value.code == "timed_out"
    assert time.monotonic() - t < 1.8  # the store's timeout once, not twice
    out[0] = -1
    w1.push("w", np.ones(1, np.float32))  # the round closes: the held pull answers into nothing
    fresh = np.zeros(1, np.float32)
    w0.wait(w0.pull("w", out=fresh))
    assert fresh[0] == 2 and out[0] == -1


def test_workers_in_threads_meet_in_sync_rounds():
    stores = troupe.kv.create_local_group(3, mode="sync")
    stores[0].init("w", np.zeros(2, np.float32))
    outs = [np.zeros(2, np.float32) for _ in stores]

    def worker(r):
        s = stores[r]
        s.barrier()
        s.push("w", np.full(2, r + 1, np.float32))
        s.wait(s.pull("w", out=outs[r]))

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    for o in outs:
        np.testing.assert_array_equal(o, np.full(2, 6, np.float32))
    assert [s.rank for s in stores] == [0, 1, 2] and stores[0].num_workers == 3


def _on_every_store(stores, fn):
    """fn(store) on a thread per store; the results in rank order."""
    out = [None] * len(stores)
    errors = []

    def run(r):
        try:
            out[r] = fn(stores[r])
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    if errors:
        raise errors[0]
    return out


def test_horovod_style_collectives_give_every_worker_the_same_values():
    torch = pytest.importorskip("torch")
    stores = troupe.kv.create_local_group(3, servers=2)

    def calls(s):
        r = s.rank
        mine = torch.full((2, 3), float(r + 1))
        avg = s.allreduce(mine)                                   # a new tensor, averaged
        total = s.allreduce(mine.numpy(), op=troupe.kv.Sum)       # NumPy in, NumPy out
        biggest = s.allreduce(mine, op=troupe.kv.Max, name="m")
        least = s.allreduce(mine, op=troupe.kv.Min)
        product = s.allreduce(mine, op=troupe.kv.Product)
        root = s.broadcast(torch.full((2,), float(r)), root_rank=2)
        params = {"b": torch.full((2,), float(r)), "w": torch.full((3,), float(10 * r)),
                  "count": torch.tensor(2**40 + r)}                # int64: crosses bit for bit
        s.broadcast_parameters(params, root_rank=1)                # in place, as Horovod's
        gathered = s.allgather(torch.full((r, 2), float(r)))       # rank 0 gives no rows
        return avg, total, biggest, least, product, root, params, gathered, mine

    for avg, total, biggest, least, product, root, params, gathered, mine in _on_every_store(stores, calls):
        assert isinstance(avg, torch.Tensor) and isinstance(total, np.ndarray)
        assert torch.equal(avg, torch.full((2, 3), 2.0)) and (total == 6).all()
        assert torch.equal(biggest, torch.full((2, 3), 3.0))
        assert torch.equal(least, torch.full((2, 3), 1.0)) and torch.equal(product, torch.full((2, 3), 6.0))
        assert torch.equal(root, torch.full((2,), 2.0))
        assert torch.equal(params["b"], torch.full((2,), 1.0)) and torch.equal(params["w"], torch.full((3,), 10.0))
        assert params["count"].item() == 2**40 + 1
        assert torch.equal(gathered, torch.tensor([[1.0, 1.0], [2.0, 2.0], [2.0, 2.0]]))
        assert mine.shape == (2, 3)  # the inputs are left as they were


def test_a_collective_that_disagrees_or_is_made_alone_raises_troupe_error():
    stores = troupe.kv.create_local_group(2, timeout=0.3)
    codes = _on_every_store(stores, lambda s: _code(lambda: s.allreduce(np.ones(2 + s.rank, np.float32))))
    assert codes == ["bad_shape", "bad_shape"]
    assert _code(lambda: stores[0].allreduce(np.ones(2, np.float32), op="median")) == "bad_job"
    assert _code(lambda: stores[0].allreduce(np.ones(2, np.float64))) == "bad_dtype"
    assert _code(lambda: stores[0].allgather(np.array(1.0, np.float32))) == "bad_shape"
    assert _code(lambda: stores[0].allreduce(np.ones(2, np.float32))) == "timed_out"


def _code(fn):
    try:
        fn()
    except troupe.Error as e:
        return e.code
    return "no error"


def test_ctrl_c_interrupts_a_wait():
    script = (
        "import numpy as np, troupe, sys\n"
        "w0, w1 = troupe.kv.create_local_group(2, mode='sync', timeout=60)\n"
        "w0.init('w', np.zeros(1, np.float32)); w0.push('w', np.ones(1, np.float32))\n"
        "h = w0.pull('w', out=np.zeros(1, np.float32))\n"
        "print('waiting', flush=True)\n"
        "w0.wait(h)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=os.environ)
    assert p.stdout.readline().strip() == "waiting"
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=10)
    assert p.returncode != 0
    assert "KeyboardInterrupt" in err


def test_mxnets_device_types_are_the_cpu_stores_and_say_so_once(monkeypatch, capsys):
    for k in [k for k in os.environ if k.startswith("TROUPE_")]:
        monkeypatch.delenv(k)
    monkeypatch.setattr(troupe.kv, "_said", set())
    kv = troupe.kv.create("device")
    kv.init("w", np.ones(2, np.float32))
    troupe.kv.create("device")
    assert capsys.readouterr().err.count("type 'device' reduces on the CPU here, as 'local'") == 1
    with pytest.raises(troupe.Error) as e:  # dist_sync's: it joins a launched job
        troupe.kv.create("dist_device_sync")
    assert e.value.code == "bad_job" and "TROUPE_COORDINATOR" in str(e.value)
    assert "as 'dist_sync'" in capsys.readouterr().err
    with pytest.raises(troupe.Error) as e:
        troupe.kv.create("nccl")
    assert e.value.code == "bad_job" and "dist_device_sync" in str(e.value)
