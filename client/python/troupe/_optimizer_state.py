"""broadcast_optimizer_state for troupe.horovod: an optimizer's param group options and
state, from one rank to every other, as Horovod's call does: options first, as 64-bit
tensors written back in their Python type, then a fresh optimizer makes its state under
them, then the state's tensors and counters cross."""
from .errors import Error


def broadcast(optimizer, root_rank, broadcast_parameters):
    """Horovod's: the optimizer's state (momentum buffers, Adam's moments and steps) and its
    param groups' options (lr, momentum, betas, weight_decay, nesterov, ...) take rank
    root_rank's values, tensors in place and numbers bit for bit, so a rank that loaded a
    checkpoint brings the others to it. The options go first; then an optimizer with no
    state yet (a fresh one) makes it under them, as Horovod's does, with a step on zero
    gradients, after which its parameters and gradients are put back. Every worker must
    wrap the same kind of optimizer on the same parameters (each entry is one call);
    options that are not numbers (None) stay. broadcast_parameters(tensors, root_rank):
    troupe.horovod's, which broadcasts a dict of tensors in place."""
    import torch

    opt = optimizer
    if not isinstance(opt, torch.optim.Optimizer):  # a wrapper: troupe.horovod's, or troupe.torch's
        opt = getattr(opt, "_opt", None) or getattr(opt, "optimizer", None)
        if not isinstance(opt, torch.optim.Optimizer):
            raise Error("bad_job", f"broadcast_optimizer_state takes a torch optimizer or a DistributedOptimizer, "
                                   f"not {type(optimizer).__name__}")
    if isinstance(opt, torch.optim.LBFGS):
        raise Error("bad_job", "broadcast_optimizer_state cannot make LBFGS's state (its step needs a closure); "
                               "broadcast its parameters only")
    # The options first: they decide which state a fresh optimizer makes (Adam's amsgrad).
    tensors, put_back = {}, []
    for g, group in enumerate(opt.param_groups):
        for key, value in sorted(group.items()):
            if key != "params":
                _share(tensors, put_back, f"group.{g}.{key}", value, group, key)
    _broadcast_and_put_back(tensors, put_back, root_rank, broadcast_parameters)
    params = [p for group in opt.param_groups for p in group["params"]]  # state_dict's numbering
    if not any(opt.state.get(p) for p in params):
        _make_state(opt)
    for pid, p in enumerate(params):
        entries = opt.state.get(p) or {}
        for key, value in sorted(entries.items()):
            _share(tensors, put_back, f"state.{pid}.{key}", value, entries, key)
    _broadcast_and_put_back(tensors, put_back, root_rank, broadcast_parameters)


def _broadcast_and_put_back(tensors, put_back, root_rank, broadcast_parameters):
    broadcast_parameters(tensors, root_rank)
    for put in put_back:
        put()
    tensors.clear()
    put_back.clear()


def _share(tensors, put_back, name, value, holder, key):
    """Adds `value` (holder[key]) to the broadcast: a tensor as it is, a number (or a tuple
    of numbers, as Adam's betas) as a 64-bit tensor that put_back writes back in its type."""
    import torch

    if torch.is_tensor(value):
        tensors[name] = value
        return
    numbers = value if isinstance(value, tuple) else (value,)
    if not numbers or not all(isinstance(x, (bool, int, float)) for x in numbers):
        return
    kinds = [type(x) for x in numbers]
    wire = torch.tensor([float(x) if k is float else int(x) for x, k in zip(numbers, kinds)],
                        dtype=torch.float64 if float in kinds else torch.int64)
    tensors[name] = wire

    def put():
        got = tuple(k(x) for k, x in zip(kinds, wire.tolist()))
        holder[key] = got if isinstance(value, tuple) else got[0]
    put_back.append(put)


def _make_state(opt):
    """Makes a fresh optimizer's state with one step on zero gradients (Horovod's way),
    then puts its parameters and their gradients back as they were."""
    import torch

    params = [p for group in opt.param_groups for p in group["params"] if p.requires_grad]
    kept = [(p, p.detach().clone(), None if p.grad is None else p.grad.detach().clone()) for p in params]
    with torch.no_grad():
        for p in params:
            p.grad = torch.zeros_like(p)
    opt.step()
    with torch.no_grad():
        for p, value, grad in kept:
            p.copy_(value)
            p.grad = grad
