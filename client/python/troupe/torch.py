"""troupe.torch: PyTorch training on Troupe's shard servers, the way Horovod wraps an optimizer.

    kv = troupe.kv.create('dist_sync')
    troupe.torch.broadcast_parameters(model, kv)           # rank 0's values everywhere
    opt = troupe.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                            model.named_parameters(), kv)
    loss.backward(); opt.step(); opt.zero_grad()

Gradients are pushed from hooks as backward accumulates them, in buckets (DDP's
gradient buckets): the parameters, in the reverse of their registration order (about
the order backward produces them), are grouped into buckets of at least bucket_bytes
(default 1 MiB; 0 pushes each parameter alone), and a bucket goes as one push and one
pull (one message per shard each) as soon as its last gradient is there, so
communication overlaps the rest of backward with few messages for models of many small
tensors. The shards sum and update per key, so in sync the result is bitwise the same
for every bucket size. step() waits for the pushes and pulls and copies the new values
into the parameters.

- update_on_kvstore=True (the default but in --mode allreduce): the wrapped optimizer's kind and hyper-parameters
  (SGD with momentum/nesterov/weight decay, or Adam) are sent to the shards, which update
  the parameters; the wrapped optimizer itself never steps. They are sent again before
  the first push of any step where they changed, so PyTorch's learning-rate schedulers
  (torch.optim.lr_scheduler, on the wrapped optimizer) drive the shards; a change of lr
  alone keeps the shards' momentum and Adam moments. Each change costs one round trip
  through the coordinator: schedulers that step every batch pay it every step.
- update_on_kvstore=False (sync only): step() pulls the workers' summed gradient into
  .grad, averages it, and steps the wrapped optimizer locally.
Every mode applies the workers' average (Horovod's convention): each gradient is divided
by the number of workers before it is pushed, so a sync round applies the average and an
async or ssp push is a worker's share of it (its weight decay too), and the same script
moves its parameters by the same amount per sample in every mode. In async and ssp the shards also warm the
learning rate up from a tenth over the first async_warmup_steps steps of each worker (200;
0: none), since gradients computed on parameters other workers have moved since hurt most
early in training, and a network with BatchNorm most of all (Note [Asynchrony in a user's
loop] in client/python/troupe/torch.py).
Or Horovod's way, without the shards' optimizer: troupe.torch.allreduce_gradients(model,
kv) after backward averages every .grad over the workers (fused into few calls), and your
own optimizer steps on each worker. In a job launched with --mode allreduce (no shard
servers; the workers reduce round a ring of their own) that is what DistributedOptimizer
does: step() averages the gradients with allreduce_gradients and steps the wrapped
optimizer on every worker, and broadcast_parameters broadcasts rank 0's values. For
allreduces that overlap backward, use troupe.horovod's DistributedOptimizer.

backward_passes_per_step=N accumulates as Horovod does: a gradient is pushed (or, in
--mode allreduce, averaged) after its N-th backward pass, the sum autograd accumulated,
with no division by N (scale the loss by 1/N for the mean); step() after fewer passes,
or zero_grad() between them, raises troupe.Error and keeps what was accumulated
(client/python/troupe/_accumulation.py).
"""
import torch as _torch

from . import _troupe
from . import kv as _kv
from ._accumulation import BackwardPasses as _BackwardPasses
from .errors import Error


def _named(params):
    named = list(params)
    if named and not isinstance(named[0], tuple):
        named = [(f"param.{i}", p) for i, p in enumerate(named)]
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        raise Error("duplicate", "named_parameters holds a name twice; every parameter needs its own key")
    return named


def broadcast_parameters(model_or_params, kv, prefix=""):
    """Makes every worker start from rank 0's parameters: rank 0 initialises the keys, the
    others wait at a barrier and pull them into their tensors. In a resumed job (the
    store's resumed_step) the keys hold the checkpoint's values, which every worker,
    rank 0 too, pulls."""
    named = _named(model_or_params.named_parameters() if hasattr(model_or_params, "named_parameters")
                   else model_or_params)
    if kv.mode == "allreduce":  # no keys: a ring's broadcast
        kv.broadcast_parameters([(prefix + n, p.data) for n, p in named], 0)
        return
    if kv.rank == 0:
        for name, p in named:
            kv.init(prefix + name, p.data)
    kv.barrier()
    if kv.rank != 0 or getattr(kv, "resumed_step", 0) > 0:
        for name, p in named:
            kv.init(prefix + name, p.data)
        for name, p in named:
            kv.pull(prefix + name, out=p.data)
        kv.wait_all()


def allreduce_gradients(model_or_params, kv, op=_kv.Average, fusion_bytes=64 << 20):
    """Horovod's way, after backward and before your own optimizer's step(): every
    parameter's .grad becomes its reduction (op: Average, Sum, Max, Min, Product) over the workers, with
    kv.allreduce. Gradients are packed, in parameter order, into buffers of at most
    fusion_bytes (Horovod's tensor fusion, with its 64 MiB default; a larger gradient goes
    alone), and each buffer is one call, so a model of many small tensors costs few calls.
    Every element is reduced in rank order whatever the packing, so the result is bitwise
    the same for every fusion_bytes. A parameter without a gradient counts as zeros, so
    every worker makes the same calls. Returns the number of calls made."""
    if fusion_bytes < 0:
        raise Error("bad_job", f"fusion_bytes is {fusion_bytes}; give 0 (no fusion) or more")
    named = _named(model_or_params.named_parameters() if hasattr(model_or_params, "named_parameters")
                   else model_or_params)
    params = [p for _, p in named if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = _torch.zeros_like(p)
        if p.dtype != _torch.float32:
            raise Error("bad_dtype", f"a {p.dtype} gradient; Troupe reduces float32")
    groups = [params[first:last] for first, last in _troupe.plan_fusion([p.numel() for p in params], fusion_bytes)]
    for group in groups:
        flat = _torch.cat([p.grad.reshape(-1) for p in group])  # the fusion buffer
        kv.allreduce(flat, op=op, out=flat)
        at = 0
        for p in group:
            n = p.numel()
            p.grad.copy_(flat[at:at + n].view_as(p.grad))
            at += n
    return len(groups)


def _server_optimizer(optimizer):
    if len(optimizer.param_groups) != 1:
        raise Error("bad_job", "update_on_kvstore needs one parameter group; pass update_on_kvstore=False")
    g = optimizer.param_groups[0]
    if isinstance(optimizer, _torch.optim.SGD):
        if g.get("dampening", 0) != 0:
            raise Error("bad_job", "SGD with dampening is not supported on the shards")
        return dict(kind="sgd", lr=g["lr"], momentum=g.get("momentum", 0.0), nesterov=g.get("nesterov", False),
                    weight_decay=g.get("weight_decay", 0.0))
    if type(optimizer) in (_torch.optim.Adam, _torch.optim.AdamW):
        if g.get("amsgrad", False):
            raise Error("bad_job", f"{type(optimizer).__name__} with amsgrad is not supported on the shards")
        kind = "adamw" if type(optimizer) is _torch.optim.AdamW else "adam"
        return dict(kind=kind, lr=g["lr"], betas=tuple(g["betas"]), eps=g["eps"], weight_decay=g.get("weight_decay", 0.0))
    raise Error("bad_job", f"{type(optimizer).__name__} cannot run on the shards (SGD, Adam and AdamW can); "
                           "pass update_on_kvstore=False to step it on the worker")


def _buckets(named, bucket_bytes):
    """The parameters in reverse order, cut into buckets of at least bucket_bytes each (the
    last may be smaller; 0: each alone), by the rule the built-in members cut their layers
    with (Note [Gradient buckets] in core/gradient_buckets.hpp)."""
    order = list(reversed(named))
    cuts = _troupe.cut_buckets([p.numel() * p.element_size() for _, p in order], bucket_bytes)
    return [order[first:last] for first, last in cuts]


# Note [Asynchrony in a user's loop]
# A PyTorch script tuned in one process or in sync lost most of its accuracy in async when
# it had BatchNorm (a residual CNN, lr 0.02, momentum 0.9, batch 64, 2 epochs of
# Fashion-MNIST, 2 workers: 88.2% in sync, 85.1-86.2% in async), though the built-in models
# lose nothing. Two things the built-in trainer has were missing:
#   - the same step per sample in every mode. The built-in trainer's lr is the step per
#     worker batch in every mode (a sync round sums); this wrapper averaged in sync only,
#     so each async push took a full step and a worker's samples moved the parameters
#     num_workers times as far as in sync. Now every push carries 1/num_workers of its
#     gradient (86.5-88.1%).
#   - a warm-up. Every built-in job warms its lr up; a user's script need not. An update
#     computed on parameters one step old, with momentum, is unstable at a far smaller
#     step than a fresh one (a delay of one step leaves a stable effective step
#     lr / (1 - momentum) below 1 / curvature, against about 38 / curvature without delay
#     at momentum 0.9), and early training is where gradients and curvature are largest.
#     So in async and ssp the shards' schedule warms up from lr / 10 over the first
#     async_warmup_steps steps of every worker (88.6-89.8% with both).
#   - the weight decay's share. The shards add the decay to every update, so N async
#     pushes of a 1/N gradient decayed the parameters N times as much per sample as a
#     sync round; the decay sent to the shards is divided by N too (at 4 workers, 2
#     epochs, weight decay 5e-4, after a final pull: 87.6-87.8% against 86.7-87.4% for
#     seed 1, 87.1-87.2% against 87.0-87.2% for seed 2; sync 89.3-89.5%).
#   - momentum of each worker's own. One velocity on the shards, shared by every push,
#     spans pushes of different workers computed on parameters N - 1 updates old; lowering
#     its momentum by the workers (--async-rule momentum) left 4 workers 1.5-2 points short
#     of sync. The default rule, dana (Note [Momentum per member] in core/member_momenta.hpp),
#     keeps one velocity per worker and the parameters a step ahead; with it the script's
#     own momentum is right in every mode (docs/benchmarks.md, pytorch_through_troupe).
class DistributedOptimizer:
    def __init__(self, optimizer, named_parameters, kv, update_on_kvstore=None, prefix="", bucket_bytes=1 << 20,
                 async_warmup_steps=200, backward_passes_per_step=1):
        self.optimizer = optimizer
        self.kv = kv
        self._named = [(prefix + n, p) for n, p in _named(named_parameters) if p.requires_grad]
        self._passes = _BackwardPasses(backward_passes_per_step)
        self._ring = kv.mode == "allreduce"
        if self._ring and update_on_kvstore:
            raise Error("bad_job", "update_on_kvstore=True needs shard servers; a job in --mode allreduce has none, "
                                   "so every worker steps its own optimizer (leave update_on_kvstore out)")
        self._hooks = []
        if self._ring:  # Horovod's way: step() averages the gradients round the ring
            # Hooks only to count passes: at one pass step() reduces whatever .grad holds, as before.
            for name, p in self._named if self._passes.passes > 1 else []:
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hooks.append((acc, acc.register_hook(self._make_counter(name))))
            return
        if update_on_kvstore is None:
            update_on_kvstore = True
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes < 0:
            raise Error("bad_job", f"bucket_bytes must be a whole number of bytes >= 0 (0: one bucket per "
                                   f"parameter), not {bucket_bytes!r}")
        self._buckets = _buckets(self._named, bucket_bytes)
        self._bucket_of = {name: b for b, bucket in enumerate(self._buckets) for name, _ in bucket}
        self._ready = [0] * len(self._buckets)  # per bucket: how many of its gradients are there, not sent
        self._update_on_kvstore = update_on_kvstore
        self._sync = kv.mode == "sync"
        self._scale = 1.0 / kv.num_workers  # Note [Asynchrony in a user's loop]
        if isinstance(async_warmup_steps, bool) or not isinstance(async_warmup_steps, int) or async_warmup_steps < 0:
            raise Error("bad_job", f"async_warmup_steps must be a whole number of steps >= 0 (0: no warm-up), "
                                   f"not {async_warmup_steps!r}")
        # The shards' schedule counts each key's updates: every worker's step is one of them.
        self._warmup_updates = 0 if self._sync else async_warmup_steps * kv.num_workers
        if not update_on_kvstore and not self._sync:
            raise Error("bad_job", f"update_on_kvstore=False needs a sync store; in {kv.mode} the shards keep only "
                                   "the latest gradient, so the optimizer must run on the shards")
        self._sent = None  # the server optimizer's hyper-parameters the shards hold
        if update_on_kvstore:
            self._follow_optimizer()
        self._pending = []  # push and pull handles of this step
        self._incoming = {}  # name -> the buffer its pull writes (copied into the parameter by step())
        self._pushed = set()
        for name, p in self._named:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]  # the parameter's gradient accumulator
            self._hooks.append((acc, acc.register_hook(self._make_hook(name, p))))

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def _follow_optimizer(self):
        # The wrapped optimizer's hyper-parameters go to the shards whenever they changed
        # (a learning-rate scheduler's step, a hand-set lr), before this step's first push;
        # a change of lr alone keeps the shards' momentum and moments, as in PyTorch.
        wanted = _server_optimizer(self.optimizer)
        if not self._sync:  # a push is a worker's share of the whole update, its decay too
            wanted["weight_decay"] *= self._scale
        if self._warmup_updates:
            wanted["warmup_updates"] = self._warmup_updates
        if wanted != self._sent:
            self.kv.set_optimizer(**wanted)
            self._sent = wanted

    def _make_counter(self, name):
        def hook(*_):  # returns nothing: a value would replace the gradient
            self._passes.arrived(name, name)
        return hook

    def _make_hook(self, name, p):
        # A bucket is pushed once backward has all its gradients, and its pull is asked for
        # right behind the push: the shard answers it once the push is applied (in sync, once
        # the round closes), so both overlap the rest of backward.
        def hook(*_):
            if not self._passes.arrived(name, name):  # more passes to sum before it goes
                return
            if not self._pushed and self._update_on_kvstore:
                self._follow_optimizer()
            if self._scale != 1.0:
                p.grad.mul_(self._scale)
            self._pushed.add(name)
            b = self._bucket_of[name]
            self._ready[b] += 1
            if self._ready[b] == len(self._buckets[b]):
                self._send(b)
        return hook

    def _send(self, b):
        # The pulls write buffers of their own, because backward may still read the parameters.
        names, grads, bufs = [], [], []
        for name, p in self._buckets[b]:
            if name not in self._pushed:
                continue
            buf = self._incoming.get(name)
            if buf is None:
                buf = self._incoming[name] = _torch.empty_like(p.data, memory_format=_torch.contiguous_format)
            names.append(name)
            grads.append(p.grad)
            bufs.append(buf)
        self._ready[b] = 0
        self._pending.append(self.kv.push(names, grads))
        self._pending.append(self.kv.pull(names, out=bufs))

    def step(self, closure=None):
        if closure is not None:
            raise Error("bad_job", "DistributedOptimizer.step() takes no closure")
        self._passes.check_step()
        self._passes.reset()
        if self._ring:
            allreduce_gradients(self._named, self.kv)
            self.optimizer.step()
            return
        for b, ready in enumerate(self._ready):  # buckets that backward did not complete
            if ready:
                self._send(b)
        # A step that raises (a timeout, a lost shard) leaves nothing behind, so the next
        # backward starts a fresh one; a call not waited for stays with the store, which
        # keeps its arrays referenced.
        pending, self._pending = self._pending, []
        pushed, self._pushed = self._pushed, set()
        for h in pending:
            self.kv.wait(h)
        missing = [n for n, _ in self._named if n not in pushed]
        if missing and self._sync:
            raise Error("bad_job", f"no gradient for {', '.join(missing[:3])}: in sync every worker pushes every "
                                   "parameter each step (freeze unused parameters with requires_grad=False)")
        with _torch.no_grad():
            for n, p in self._named:
                if n in pushed:
                    (p if self._update_on_kvstore else p.grad).copy_(self._incoming[n])
        if not self._update_on_kvstore:
            self.optimizer.step()
        else:
            # The shards stepped: a scheduler on the wrapped optimizer counts it as a step
            # (otherwise it warns that it stepped before the optimizer did).
            self.optimizer._step_count = getattr(self.optimizer, "_step_count", 0) + 1

    def zero_grad(self, set_to_none=False):
        self._passes.check_zero_grad()
        # Gradients stay allocated: the pushes read them in place.
        self.optimizer.zero_grad(set_to_none=False)

    def state_dict(self):
        return self.optimizer.state_dict()
