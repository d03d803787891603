"""troupe.kv: the key-value store, as MXNet's KVStore users know it.

    kv = troupe.kv.create('local')            # or 'dist_sync', 'dist_async', 'dist_ssp', 'dist_allreduce'
    kv.init('w', w)                           # the first init of a key wins
    kv.push('w', grad)                        # returns a handle
    kv.pull('w', out=w)                       # writes into w, in place
    kv.wait_all()
    avg = kv.allreduce(grad)                  # Horovod's collectives: allreduce,
    kv.broadcast_parameters(model.state_dict(), root_rank=0)   # broadcast, allgather

Values are NumPy arrays or PyTorch CPU tensors, float32 and C-contiguous; they cross
without a copy, so an array given to push or pull must stay untouched until wait() of
its handle (or wait_all()); the store keeps a reference to it until then. Anything else
is refused with troupe.Error naming the key, the dtype and the shape.

A job launched with --mode allreduce has no shard servers: its workers reduce round a
ring of their own, as Horovod's do, so only the collectives work there, and init, push
and pull are refused saying so.
"""
import numbers
import sys

import numpy as np

from . import _troupe
from .errors import Error

# allreduce's reductions, by Horovod's names.
Average, Sum, Max, Min, Product = "average", "sum", "max", "min", "product"

_MODES = {"local": None, "device": None, "dist": "any", "dist_sync": "sync", "dist_async": "async", "dist_ssp": "ssp",
          "dist_allreduce": "allreduce", "dist_device_sync": "sync"}
# MXNet's types that reduce on a GPU; Troupe's store reduces on the CPU (its shards or its
# ring), so they are the CPU store's types, said once per process.
_ON_THE_CPU = {"device": "local", "dist_device_sync": "dist_sync"}
_said = set()


def create(name="local", *, mode="sync", servers=1, staleness=2, big_array_bound=1_000_000, timeout=300.0):
    """A store. 'local' (or MXNet's 'device') keeps the shards in this process and trains
    in `mode`; 'dist_*' join the job `troupe launch` started, as TROUPE_* describes it
    ('dist' in whatever mode that job runs; MXNet's 'dist_device_sync' is 'dist_sync')."""
    if name not in _MODES:
        raise Error("bad_job", f"kvstore type {name!r} is not one of {', '.join(_MODES)}")
    if name in _ON_THE_CPU and name not in _said:
        _said.add(name)
        sys.stderr.write(f"troupe.kv: type {name!r} reduces on the CPU here, as {_ON_THE_CPU[name]!r}: Troupe's "
                         "store takes CPU arrays and tensors\n")
    kind = "local" if _MODES[name] is None else _ON_THE_CPU.get(name, name)
    return KVStore(_troupe.open(kind, mode, servers, staleness, big_array_bound, timeout), timeout)


def create_local_group(workers, *, mode="sync", servers=1, staleness=2, big_array_bound=1_000_000, timeout=300.0):
    """`workers` stores sharing one set of in-process shards (threads of one process, tests)."""
    stores = _troupe.open_local_group(workers, mode, servers, staleness, big_array_bound, timeout)
    return [KVStore(s, timeout) for s in stores]


def _key(k):
    if isinstance(k, bool) or not isinstance(k, (numbers.Integral, str, bytes)):
        raise Error("malformed", f"key {k!r} is not an integer or a string")
    if isinstance(k, numbers.Integral):
        return int(k)
    try:
        if isinstance(k, bytes):
            return k.decode("utf-8")
        k.encode("utf-8")  # a str with lone surrogates has no UTF-8 form
        return k
    except (UnicodeDecodeError, UnicodeEncodeError):
        raise Error("malformed", f"key {k!r} is not valid UTF-8; keys are integers or UTF-8 strings") from None


def _array(key, x, writable, who=None):
    """A zero-copy NumPy view of x, or troupe.Error naming `who` (default: the key)."""
    who = who or f"key {key!r}"
    if type(x).__module__.startswith("torch"):
        if x.device.type != "cpu":
            raise Error("bad_dtype", f"{who}: a tensor on {x.device}; Troupe reads and writes CPU tensors")
        if not x.is_contiguous():
            raise Error("bad_dtype", f"{who}: {x.dtype} tensor of shape {tuple(x.shape)} is not contiguous")
        x = x.detach().numpy()
    if not isinstance(x, np.ndarray):
        raise Error("bad_dtype", f"{who}: a {type(x).__name__}; pass a float32 NumPy array or a PyTorch CPU tensor")
    if x.dtype != np.float32:
        raise Error("bad_dtype", f"{who}: dtype {x.dtype} with shape {x.shape}; Troupe takes float32")
    if not x.flags["C_CONTIGUOUS"]:
        raise Error("bad_dtype", f"{who}: float32 array of shape {x.shape} is not C-contiguous")
    if writable and not x.flags["WRITEABLE"]:
        raise Error("bad_dtype", f"{who}: the output array of shape {x.shape} is read-only")
    return x


def _like(original, result):
    """`result` (a NumPy array) as a PyTorch tensor when `original` was one."""
    if type(original).__module__.startswith("torch"):
        import torch

        return torch.from_numpy(result)
    return result


def _pairs(key, value, what):
    if isinstance(key, (list, tuple)):
        if not isinstance(value, (list, tuple)) or len(value) != len(key):
            raise Error("bad_shape", f"{what}: {len(key)} keys need a list of {len(key)} arrays")
        return [_key(k) for k in key], list(value)
    return [_key(key)], [value]


class KVStore:
    """init/push/pull/row_sparse_pull/wait on Troupe's shards (see the module's doc)."""

    def __init__(self, store, timeout):
        self._s = store
        self._timeout = timeout
        self._keep = {}  # handle -> the arrays it reads or writes
        self._after = {}  # a pushpull's pull handle -> its push's, waited for first

    def init(self, key, value):
        for k, v in zip(*_pairs(key, value, "init")):
            self._s.init(k, _array(k, v, False))

    def push(self, key, value, priority=0):
        """Pushes gradients; a list of arrays for one key (one per device) is summed first."""
        keys, values = _pairs(key, value, "push")
        arrays = []
        for k, v in zip(keys, values):
            if isinstance(v, (list, tuple)):
                parts = [_array(k, x, False) for x in v]
                v = np.add.reduce(parts) if len(parts) > 1 else parts[0]
            arrays.append(_array(k, v, False))
        h = self._s.push(keys, arrays, priority)
        self._keep[h] = arrays
        return h

    def pull(self, key, out, priority=0):
        keys, outs = _pairs(key, out, "pull")
        arrays = [_array(k, o, True) for k, o in zip(keys, outs)]
        h = self._s.pull(keys, arrays, priority)
        self._keep[h] = arrays
        return h

    def pushpull(self, key, value, out=None, priority=0):
        """MXNet's pushpull: pushes `value` (as push does) and pulls the keys' new values into
        `out`, or into `value` itself when out is None. Returns the pull's handle; wait() on
        it waits for the push first and raises the push's error, if any, after both."""
        if out is None and any(isinstance(v, (list, tuple)) for v in _pairs(key, value, "pushpull")[1]):
            raise Error("bad_shape", "pushpull: a key given one array per device needs out= (the arrays to pull into)")
        pushed = self.push(key, value, priority)
        pulled = self.pull(key, value if out is None else out, priority)
        self._after[pulled] = pushed
        return pulled

    def row_sparse_pull(self, key, out, row_ids, priority=0):
        """Rows `row_ids` of a key of shape (R, ...) into out of shape (len(row_ids), ...)."""
        k = _key(key)
        ids = [int(r) for r in (row_ids.tolist() if hasattr(row_ids, "tolist") else row_ids)]
        arr = _array(k, out, True)
        h = self._s.row_sparse_pull(k, ids, arr, priority)
        self._keep[h] = [arr]
        return h

    # A call's arrays stay referenced until wait() returns or raises troupe.Error: a call
    # that timed out is abandoned then, and the store uses its arrays no more. A wait cut
    # short by Ctrl-C leaves the call in flight, so its arrays stay referenced until a
    # later wait() or close().
    def wait(self, handle):
        first = self._after.pop(handle, None)
        if first is not None:  # a pushpull: its push, then its pull whatever the push did
            try:
                self.wait(first)
            except Error:
                try:
                    self.wait(handle)
                except Error:
                    pass
                raise
        try:
            self._s.wait(handle, self._timeout)
        except Error:
            self._keep.pop(handle, None)
            raise
        self._keep.pop(handle, None)

    def wait_all(self):
        self._after.clear()
        try:
            self._s.wait_all(self._timeout)
        except Error:
            self._keep.clear()
            raise
        self._keep.clear()

    def set_optimizer(self, kind="sgd", lr=0.01, momentum=0.0, nesterov=False, weight_decay=0.0, betas=(0.9, 0.999),
                      eps=1e-8, schedule="constant", warmup_updates=0, total_updates=1, final_fraction=0.0):
        """The shards' optimizer (MXNet's update_on_kvstore); the schedule counts each key's updates."""
        self._s.set_optimizer(kind, lr, momentum, nesterov, weight_decay, betas[0], betas[1], eps, schedule,
                              warmup_updates, total_updates, final_fraction)

    def barrier(self):
        self._s.barrier()

    # Collectives among the job's live workers, as Horovod names them (hvd.allreduce,
    # hvd.broadcast, hvd.allgather); the shards combine the workers' tensors. Each blocks
    # until every live worker has made the call (at most the store's timeout), and every
    # worker gets the same bits. Calls meet by name: unnamed calls are numbered by each
    # store, so every worker makes them in the same order (Horovod asks the same); a
    # worker that joins a running job names its calls. A worker lost before making a call
    # fails it everywhere with troupe.Error code 'member_lost'; calls that disagree raise
    # 'bad_shape', and a NaN or infinity in any worker's tensor of a reduction 'not_finite'.
    def allreduce(self, tensor, op=Average, name=None, out=None):
        """The workers' tensors reduced by op (Average, Sum, Max, Min or Product), as a new array or tensor
        of the input's kind, or written into `out` (which may be `tensor` itself)."""
        x = _array(None, tensor, False, "allreduce")
        result = np.empty_like(x) if out is None else _array(None, out, True, "allreduce's out")
        self._s.allreduce(x, result, op, name or "")
        return out if out is not None else _like(tensor, result)

    def broadcast_(self, tensor, root_rank, name=None):
        """Rank root_rank's `tensor` into every worker's `tensor`, in place; returns it."""
        self._s.broadcast(_array(None, tensor, True, "broadcast_"), int(root_rank), name or "")
        return tensor

    def broadcast(self, tensor, root_rank, name=None):
        """Rank root_rank's `tensor`, as a new array or tensor; `tensor` is left as it was."""
        x = _array(None, tensor, False, "broadcast")
        result = x.copy()
        self._s.broadcast(result, int(root_rank), name or "")
        return _like(tensor, result)

    def broadcast_parameters(self, params, root_rank):
        """Horovod's broadcast_parameters: every tensor of a state_dict (or of a list of
        (name, tensor) pairs, as model.named_parameters() gives) takes rank root_rank's
        value, in place, each call named by its parameter's name. Tensors of other dtypes
        than float32 (a state_dict's integer counters) cross bit for bit."""
        items = params.items() if hasattr(params, "items") else params
        for name, p in sorted(items, key=lambda kv: kv[0]):
            x = p.detach().numpy() if type(p).__module__.startswith("torch") else p
            if isinstance(x, np.ndarray) and x.dtype != np.float32:
                # A broadcast copies bits, so any dtype crosses exactly as float32 words
                # (BatchNorm's int64 num_batches_tracked, for one).
                if x.nbytes % 4 or not x.flags["C_CONTIGUOUS"]:
                    raise Error("bad_dtype", f"parameter {name!r}: {x.dtype} of shape {x.shape} is not contiguous "
                                             "whole 4-byte words")
                x = x.reshape(-1).view(np.float32)
            self.broadcast_(x, root_rank, name="param:" + name)

    def allgather(self, tensor, name=None):
        """Every worker's tensor, concatenated along the first dimension in rank order (the
        other dimensions must agree), as a new array or tensor of the input's kind."""
        data, _ranks, _rows = self._s.allgather(_array(None, tensor, False, "allgather"), name or "")
        return _like(tensor, data)

    def staleness(self, key):
        return self._s.staleness(_key(key))

    def transfer_stats(self):
        """What this store moved to and from shards in other processes, by path: calls and
        bytes through the same-host fast path's shared memory, and through the network's
        messages (bytes as sent: encoded under the job's --compression and --pull-precision;
        pushes counted when sent, pulls when answered). A 'local' store moves nothing and
        reports zeros."""
        return self._s.transfer_stats()

    @property
    def rank(self):
        return self._s.rank

    @property
    def num_workers(self):
        return self._s.num_workers

    @property
    def resumed_step(self):
        """The step a resumed job goes on from (launched with --resume, or restarted by
        launch from its newest checkpoint): the rounds of its keys that the checkpoint
        holds, whose values and optimizer state the shards restored. A loop that counts a
        step as one push of each key starts its count there; 0 for a fresh job."""
        return self._s.resumed_step

    @property
    def restored_step(self):
        """The step a lost shard server's keys went back to when a server took its place
        while this loop went on (the newest such), or None while no shard was lost
        (launched with --checkpoint-dir: the job restores the lost shard's keys from its
        newest checkpoint and the loop goes on, warned once). Those keys lost the updates
        since that step; a loop that needs an exact rollback goes back to it itself."""
        return self._s.restored_step

    @property
    def type(self):
        return self._s.type

    @property
    def mode(self):
        return self._s.mode

    def close(self):
        self._s.close()
        self._keep.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
