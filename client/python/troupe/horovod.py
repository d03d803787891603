"""troupe.horovod: Horovod's PyTorch calls on Troupe, so a Horovod script ports by its
import line:

    import troupe.horovod as hvd              # was: import horovod.torch as hvd
    hvd.init()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size()))
    loss.backward(); opt.step()               # the gradients are averaged, then opt steps
    avg = hvd.allreduce(metric)

Run it with `troupe launch --local --workers N --servers S -- python3 script.py` (or
without launch: one worker, shards in this process). Each call is the store's
(troupe.kv: allreduce, broadcast, allgather on Troupe's shards, Note [Collectives on the
shards]); failures raise troupe.Error, a lost worker's as code 'member_lost'. Horovod's
local ranks, process sets and Adasum are not offered.
"""
from . import kv as _kv
from . import torch as _tt
from .errors import Error

Average, Sum, Max = _kv.Average, _kv.Sum, _kv.Max

_store = None


def init(store=None, timeout=300.0):
    """Joins the job `troupe launch` started (or, outside one, a one-worker local store);
    `store`: use this troupe.kv store instead."""
    global _store
    _store = store if store is not None else _kv.create("dist" if _launched() else "local", timeout=timeout)


def _launched():
    import os

    return "TROUPE_COORDINATOR" in os.environ


def _kv_store():
    if _store is None:
        raise Error("bad_job", "call troupe.horovod.init() first")
    return _store


def is_initialized():
    return _store is not None


def rank():
    return _kv_store().rank


def size():
    return _kv_store().num_workers


def allreduce(tensor, average=None, name=None, op=None):
    """A new tensor: `tensor` reduced over the workers (op: Average by default, Sum, Max;
    Horovod's older average=False means Sum)."""
    if op is None:
        op = Sum if average is False else Average
    return _kv_store().allreduce(tensor, op=op, name=name)


def allreduce_(tensor, average=None, name=None, op=None):
    """allreduce, in place; returns `tensor`."""
    if op is None:
        op = Sum if average is False else Average
    return _kv_store().allreduce(tensor, op=op, name=name, out=tensor)


def broadcast(tensor, root_rank, name=None):
    return _kv_store().broadcast(tensor, root_rank, name=name)


def broadcast_(tensor, root_rank, name=None):
    return _kv_store().broadcast_(tensor, root_rank, name=name)


def allgather(tensor, name=None):
    return _kv_store().allgather(tensor, name=name)


def broadcast_parameters(params, root_rank):
    """Every tensor of a state_dict or of (name, tensor) pairs takes rank root_rank's value."""
    _kv_store().broadcast_parameters(params, root_rank)


def broadcast_optimizer_state(optimizer, root_rank):
    """The optimizer's state tensors (momentum buffers, Adam's moments and steps) take rank
    root_rank's values, in place. Every worker must hold the same entries (have stepped
    alike), since each entry is one call."""
    state = optimizer.state_dict()
    tensors = {}
    for pid, entries in sorted(state["state"].items()):
        for key, value in sorted(entries.items()):
            if hasattr(value, "detach"):
                tensors[f"state.{pid}.{key}"] = value
    _kv_store().broadcast_parameters(tensors, root_rank)


class DistributedOptimizer:
    """Wraps a torch optimizer: step() averages every gradient over the workers
    (troupe.torch.allreduce_gradients, fused into buffers of at most fusion_bytes), then
    steps the wrapped optimizer. Other attributes are the wrapped optimizer's."""

    def __init__(self, optimizer, named_parameters=None, op=None, fusion_bytes=64 << 20):
        self._opt = optimizer
        self._op = op if op is not None else Average
        self._fusion_bytes = fusion_bytes
        if named_parameters is not None:
            self._params = list(named_parameters)
        else:
            params = [p for g in optimizer.param_groups for p in g["params"]]
            self._params = [(f"param.{i}", p) for i, p in enumerate(params)]

    def step(self, closure=None):
        if closure is not None:
            raise Error("bad_job", "DistributedOptimizer.step(closure) is not supported; call backward() first")
        _tt.allreduce_gradients(self._params, _kv_store(), op=self._op, fusion_bytes=self._fusion_bytes)
        return self._opt.step()

    def zero_grad(self, *args, **kwargs):
        return self._opt.zero_grad(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._opt, name)


def shutdown():
    global _store
    if _store is not None:
        _store.close()
        _store = None
