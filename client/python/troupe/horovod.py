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
this process. Each call is the store's (troupe.kv: allreduce, broadcast, allgather);
failures raise troupe.Error. local_rank, local_size, cross_rank and cross_size are
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
from . import _optimizer_state
from ._accumulation import BackwardPasses as _BackwardPasses
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


def broadcast_parameters(params, root_rank):
    """Every tensor of a state_dict or of (name, tensor) pairs takes rank root_rank's value."""
    store = _kv_store()
    _call(lambda: store.broadcast_parameters(params, root_rank))


def broadcast_optimizer_state(optimizer, root_rank):
    """Horovod's: the optimizer's state (momentum buffers, Adam's moments and steps) and its
    param groups' options (lr, betas, momentum, amsgrad, ...) take rank root_rank's values
    (troupe/_optimizer_state.py says how, and what a fresh optimizer does)."""
    _optimizer_state.broadcast(optimizer, root_rank, broadcast_parameters)


class DistributedOptimizer:
    """Wraps a torch optimizer: backward starts the allreduce of each group of gradients
    (averaged by default, op= as allreduce's) once the group is complete, and step() waits
    for them, puts the reduced gradients in .grad and steps the wrapped optimizer. With
    backward_passes_per_step=N each gradient goes after its N-th backward pass, the sum
    autograd accumulated (troupe._accumulation: no division by N; step() after fewer
    passes, or zero_grad() between them, raises). Other attributes are the wrapped
    optimizer's. Every worker's backward must produce the same
    gradients in the same order (Horovod's rule); a parameter that got no gradient counts
    as zeros, so every worker makes the same calls."""

    def __init__(self, optimizer, named_parameters=None, op=None, fusion_bytes=64 << 20, num_groups=0,
                 backward_passes_per_step=1):
        self._opt = optimizer
        self._op = op if op is not None else Average
        self._passes = _BackwardPasses(backward_passes_per_step)
        if named_parameters is not None:
            named = [(n, p) for n, p in named_parameters]
        else:
            named = [(f"parameter {i}", p) for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])]
        named = [(n, p) for n, p in named if p.requires_grad]
        params = [p for _, p in named]
        for p in params:
            if p.dtype != _torch().float32:
                raise Error("bad_dtype", f"a {p.dtype} parameter; Troupe reduces float32")
        order = list(reversed(params))
        if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 0:
            raise Error("bad_job", f"num_groups must be a whole number >= 0 (0: groups by fusion_bytes), "
                                   f"not {num_groups!r}")
        if num_groups:
            n = min(num_groups, len(order))  # Horovod's split_list: as even as counts allow
            cuts = [len(order) * i // n for i in range(n + 1)] if n else [0]
            spans = list(zip(cuts, cuts[1:]))
        else:
            spans = _troupe.plan_fusion([p.numel() for p in order], fusion_bytes)
        self._groups = [order[first:last] for first, last in spans]
        group_of = {id(p): g for g, group in enumerate(self._groups) for p in group}
        self._ready = [0] * len(self._groups)  # per group: gradients there since the last step
        self._sent = []  # (group, handle) of the calls backward started, in their order
        self._hooks = []
        for name, p in named:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]  # the parameter's gradient accumulator
            self._hooks.append((acc, acc.register_hook(self._make_hook(group_of[id(p)], id(p), name))))

    def _make_hook(self, g, key, name):
        def hook(*_):
            if not self._passes.arrived(key, name):  # more passes to sum before it goes
                return
            self._ready[g] += 1
            # The last group waits for step(), which runs it on this thread when the others
            # are done (no handoff); the others start now, overlapping the rest of backward.
            if self._ready[g] == len(self._groups[g]) and g != len(self._groups) - 1:
                self._sent.append((g, allreduce_async_(self._fuse(g), op=self._op)))
        return hook

    def _fuse(self, g):
        """Group g's gradients packed into a new fusion buffer (zeros for a missing one)."""
        torch = _torch()
        for p in self._groups[g]:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        return torch.cat([p.grad.reshape(-1) for p in self._groups[g]])

    def step(self, closure=None):
        if closure is not None:
            raise Error("bad_job", "DistributedOptimizer.step(closure) is not supported; call backward() first")
        self._passes.check_step()
        # A step that raises (a timeout, a lost worker) leaves nothing behind.
        self._passes.reset()
        calls, self._sent = self._sent, []
        self._ready = [0] * len(self._groups)
        sent = {g for g, _ in calls}
        rest = [g for g in range(len(self._groups)) if g not in sent]  # in one order on every worker
        for g in rest[:-1]:
            calls.append((g, allreduce_async_(self._fuse(g), op=self._op)))
        if rest:  # the last call on this thread: it waits its turn behind the others
            flat = self._fuse(rest[-1])
            _call(_allreduce_call(flat, None, None, self._op, True))
        reduced = [(g, synchronize(handle)) for g, handle in calls] + ([(rest[-1], flat)] if rest else [])
        for g, flat in reduced:
            at = 0
            for p in self._groups[g]:
                n = p.numel()
                p.grad.copy_(flat[at:at + n].view_as(p.grad))
                at += n
        return self._opt.step()

    def zero_grad(self, *args, **kwargs):
        self._passes.check_zero_grad()
        return self._opt.zero_grad(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._opt, name)


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
