"""troupe.horovod: Horovod's PyTorch calls on Troupe, so a Horovod script ports by its
import line:

    import troupe.horovod as hvd              # was: import horovod.torch as hvd
    hvd.init()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size()))
    loss.backward(); opt.step()               # the gradients are averaged, then opt steps
    avg = hvd.allreduce(metric)

Run it with `troupe launch --local --workers N --mode allreduce -- python3 script.py`:
the workers reduce round a ring of their own, with no shard servers, as Horovod's do
(Note [A ring of users' loops] in client/kv_member_ring.cpp); a worker that dies fails
every call with 'stage_lost' and ends the job. Or with `--servers S` (and no --mode
allreduce) the calls go through Troupe's shards (Note [Collectives on the shards]), and a
lost worker's fails them as code 'member_lost'; or without launch: one worker, shards in
this process. Each call is the store's (troupe.kv: allreduce, broadcast, allgather;
grouped_allreduce packs its tensors into one allreduce, and broadcast_object and
allgather_object send pickles as words, troupe/_objects.py); failures raise troupe.Error. local_rank, local_size, cross_rank and cross_size are
Horovod's, from the hosts `troupe launch` placed the workers on. Process sets and Adasum
are not offered.

The *_async calls (allreduce_async, allreduce_async_, broadcast_async, broadcast_async_,
allgather_async) return a handle at once and run on a background thread, one call at a
time in the order they were made (troupe._ordered_calls); poll(handle) and
synchronize(handle) are Horovod's. As in Horovod, do not change a tensor until its call
is synchronized. Every call goes through that thread, so blocking and async calls keep
one order.

DistributedOptimizer starts each group's allreduce from backward, as soon as the group's
last gradient is there, so the calls overlap the rest of backward. The groups are fixed
when it is made, the same on every worker: the parameters in the reverse of their
registration order (about the order backward produces gradients), cut into fusion
buffers of at most fusion_bytes, or into num_groups groups (Horovod's explicit
grouping). Horovod also fuses by a cycle time, which needs its coordinator to agree each
cycle on what every worker has ready; fixed groups agree without it. On the shards every
element is reduced in rank order whatever the grouping, so the result is bitwise the same
for every fusion_bytes and num_groups. Round a ring an element's order starts at the rank
that owns its chunk of the call (Note [The ring] in core/ring_collective.hpp): every
worker ends with the same bits, run after run, but past two workers another grouping may
round differently.
"""
from . import _troupe
from . import kv as _kv
from . import _objects
from ._hvd_optimizer import DistributedOptimizer
from . import _optimizer_state
from ._ordered_calls import OrderedCalls as _OrderedCalls
from .errors import Error

Average, Sum, Max, Min, Product = _kv.Average, _kv.Sum, _kv.Max, _kv.Min, _kv.Product

_store = None
_calls = None  # the background thread every call goes through


def init(store=None, timeout=300.0):
    """Joins the job `troupe launch` started (or, outside one, a one-worker local store);
    `store`: use this troupe.kv store instead."""
    global _store, _calls
    if _calls is not None:  # init() again: the calls queued so far run first
        _calls.close()
    _store = store if store is not None else _kv.create("dist" if _launched() else "local", timeout=timeout)
    _calls = _OrderedCalls()


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


def _locality(name, alone):
    """Launch's TROUPE_<name> (tools/launch_plan.hpp, worker_locality); `alone`, the value
    for a store outside a launch (every worker in this process, on this host)."""
    import os

    _kv_store()  # init() first, as in Horovod
    value = os.environ.get("TROUPE_" + name)
    if value is None:
        if _launched():
            raise Error("bad_job", f"TROUPE_{name} is not set, though TROUPE_COORDINATOR is: `troupe launch` sets "
                                   "both; a worker started some other way sets TROUPE_LOCAL_RANK, TROUPE_LOCAL_SIZE, "
                                   "TROUPE_CROSS_RANK and TROUPE_CROSS_SIZE itself")
        return alone
    if not value.isdigit():
        raise Error("bad_job", f"TROUPE_{name} is {value!r}, not a whole number >= 0")
    return int(value)


def local_rank():
    """This worker's rank among the workers on its host."""
    return _locality("LOCAL_RANK", rank())


def local_size():
    """How many of the job's workers run on this worker's host."""
    return _locality("LOCAL_SIZE", size())


def cross_rank():
    """The index of this worker's host among the hosts with a worker of its local rank."""
    return _locality("CROSS_RANK", 0)


def cross_size():
    """How many hosts have a worker of this worker's local rank."""
    return _locality("CROSS_SIZE", 1)


def _op(average, op):
    if op is None:
        op = Sum if average is False else Average
    return op


# The store calls, as functions for the background thread (troupe._ordered_calls): the
# _async forms queue them (_submit), the blocking forms run them in their turn (_call).
# Building one asks for the store first, so a call before init() raises bad_job.
def _submit(function):
    return _calls.submit(function)


def _call(function):
    return _calls.call(function)


def _allreduce_call(tensor, average, name, op, in_place):
    store, op = _kv_store(), _op(average, op)
    return lambda: store.allreduce(tensor, op=op, name=name, out=tensor if in_place else None)


def _broadcast_call(tensor, root_rank, name, in_place):
    store = _kv_store()
    if in_place:
        return lambda: store.broadcast_(tensor, root_rank, name=name)
    return lambda: store.broadcast(tensor, root_rank, name=name)


def _allgather_call(tensor, name):
    store = _kv_store()
    return lambda: store.allgather(tensor, name=name)


def allreduce_async(tensor, average=None, name=None, op=None):
    """A handle whose synchronize() gives a new tensor: `tensor` reduced over the workers
    (op: Average by default, Sum, Max, Min, Product; Horovod's older average=False means Sum)."""
    return _submit(_allreduce_call(tensor, average, name, op, False))


def allreduce_async_(tensor, average=None, name=None, op=None):
    """allreduce_async, in place: synchronize() gives `tensor`, reduced."""
    return _submit(_allreduce_call(tensor, average, name, op, True))


def broadcast_async(tensor, root_rank, name=None):
    return _submit(_broadcast_call(tensor, root_rank, name, False))


def broadcast_async_(tensor, root_rank, name=None):
    return _submit(_broadcast_call(tensor, root_rank, name, True))


def allgather_async(tensor, name=None):
    return _submit(_allgather_call(tensor, name))


def poll(handle):
    """Whether the call of `handle` is done (synchronize() will not wait)."""
    _kv_store()
    return _calls.poll(handle)


def synchronize(handle):
    """Waits for the call of `handle` and returns its result, or raises its troupe.Error."""
    _kv_store()
    return _calls.synchronize(handle)


def allreduce(tensor, average=None, name=None, op=None):
    """A new tensor: `tensor` reduced over the workers (op: Average by default, Sum, Max,
    Min, Product; Horovod's older average=False means Sum)."""
    return _call(_allreduce_call(tensor, average, name, op, False))


def allreduce_(tensor, average=None, name=None, op=None):
    """allreduce, in place; returns `tensor`."""
    return _call(_allreduce_call(tensor, average, name, op, True))


def broadcast(tensor, root_rank, name=None):
    return _call(_broadcast_call(tensor, root_rank, name, False))


def broadcast_(tensor, root_rank, name=None):
    return _call(_broadcast_call(tensor, root_rank, name, True))


def allgather(tensor, name=None):
    return _call(_allgather_call(tensor, name))


def _grouped_call(tensors, average, name, op, in_place):
    """One allreduce of `tensors` (float32, any shapes) packed end to end; the call gives
    each back reduced, new or (in_place) in the given tensors."""
    store, op, torch = _kv_store(), _op(average, op), _torch()
    tensors = list(tensors)
    for t in tensors:
        if not torch.is_tensor(t) or t.dtype != torch.float32:
            raise Error("bad_dtype", "grouped_allreduce takes float32 torch tensors, not "
                                     f"{getattr(t, 'dtype', type(t).__name__)}")

    def run():
        if not tensors:
            return []
        flat = store.allreduce(torch.cat([t.detach().reshape(-1) for t in tensors]), op=op, name=name)
        out, at = [], 0
        for t in tensors:
            part = flat[at:at + t.numel()].view_as(t)
            at += t.numel()
            out.append(t.detach().copy_(part) if in_place else part.clone())
        return tensors if in_place else out
    return run


def grouped_allreduce(tensors, average=None, name=None, op=None):
    """New tensors: each of `tensors` reduced over the workers, all in one call."""
    return _call(_grouped_call(tensors, average, name, op, False))


def grouped_allreduce_(tensors, average=None, name=None, op=None):
    """grouped_allreduce, in place; returns `tensors`."""
    return _call(_grouped_call(tensors, average, name, op, True))


def grouped_allreduce_async(tensors, average=None, name=None, op=None):
    return _submit(_grouped_call(tensors, average, name, op, False))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None):
    return _submit(_grouped_call(tensors, average, name, op, True))


def barrier():
    """Waits until every worker has called barrier() (in its turn after the calls queued)."""
    store = _kv_store()
    _call(store.barrier)


def broadcast_object(obj, root_rank=0, name=None):
    """Rank root_rank's picklable `obj`, on every worker (troupe/_objects.py)."""
    store = _kv_store()
    prefix = (name or "broadcast_object") + "."
    send = lambda a, root, part: store.broadcast_(a, root, name=prefix + part)  # noqa: E731
    return _call(lambda: _objects.broadcast_object(obj, root_rank, store.rank == root_rank, send))


def allgather_object(obj, name=None):
    """Every worker's picklable `obj`, as a list in rank order (troupe/_objects.py)."""
    store = _kv_store()
    prefix = (name or "allgather_object") + "."
    return _call(lambda: _objects.allgather_object(obj, lambda a, part: store.allgather(a, name=prefix + part)))


def broadcast_parameters(params, root_rank):
    """Every tensor of a state_dict or of (name, tensor) pairs takes rank root_rank's value."""
    store = _kv_store()
    _call(lambda: store.broadcast_parameters(params, root_rank))


def broadcast_optimizer_state(optimizer, root_rank):
    """Horovod's: the optimizer's state (momentum buffers, Adam's moments and steps) and its
    param groups' options (lr, betas, momentum, amsgrad, ...) take rank root_rank's values
    (troupe/_optimizer_state.py says how, and what a fresh optimizer does)."""
    _optimizer_state.broadcast(optimizer, root_rank, broadcast_parameters)


def _torch():
    import torch

    return torch


def shutdown():
    """Runs the calls still queued, then leaves the job."""
    global _store, _calls
    if _calls is not None:
        _calls.close()
        _calls = None
    if _store is not None:
        _store.close()
        _store = None
