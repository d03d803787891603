"""troupe.horovod.DistributedOptimizer: a torch optimizer whose gradients are averaged
over the workers by troupe.horovod's allreduce calls, started from backward in fixed
groups (troupe.horovod's module docstring says why fixed)."""
from . import _troupe
from ._accumulation import BackwardPasses
from .errors import Error


def _torch():
    import torch  # on demand: troupe.horovod imports this module, and works without torch until used

    return torch


def _hvd():
    from . import horovod  # the calls; imported here, since troupe.horovod imports this module

    return horovod


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
        self._op = op if op is not None else _hvd().Average
        self._passes = BackwardPasses(backward_passes_per_step)
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
                self._sent.append((g, _hvd().allreduce_async_(self._fuse(g), op=self._op)))
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
            calls.append((g, _hvd().allreduce_async_(self._fuse(g), op=self._op)))
        if rest:  # the last call on this thread: it waits its turn behind the others
            flat = self._fuse(rest[-1])
            _hvd().allreduce_(flat, op=self._op)
        reduced = [(g, _hvd().synchronize(handle)) for g, handle in calls] + ([(rest[-1], flat)] if rest else [])
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
