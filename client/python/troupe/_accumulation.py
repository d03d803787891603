"""Gradient accumulation for the DistributedOptimizers (troupe.torch and troupe.horovod):
how many backward passes each parameter's gradient has had since the last step, as
Horovod's `backward_passes_per_step` counts them.

Autograd sums the passes into .grad (PyTorch's own accumulation); a wrapper sends a
gradient only at its parameter's last pass of the step, so what is reduced is that sum,
as Horovod's PyTorch wrapper does. A pass beyond the step's count raises, since it would
be summed into a gradient already sent; a step() after some passes but fewer than the
count raises and keeps what was accumulated, so the loop can finish the passes and step
again. Neither divides by the count: scale the loss (loss / passes) as in plain PyTorch.
"""
from .errors import Error


class BackwardPasses:
    def __init__(self, passes):
        if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
            raise Error("bad_job", f"backward_passes_per_step must be a whole number >= 1, not {passes!r}")
        self.passes = passes
        self._seen = {}  # parameter key -> passes since the last step

    def arrived(self, key, name):
        """Counts one backward pass of parameter `key` (`name` for errors); True when it is
        the step's last, so its gradient is complete."""
        seen = self._seen.get(key, 0)
        if seen == self.passes:
            if self.passes == 1:
                raise Error("duplicate", f"the gradient of {name} arrived twice before step(); call step() after "
                                         "every backward, or pass backward_passes_per_step=N to accumulate N")
            raise Error("duplicate", f"the gradient of {name} arrived in more than backward_passes_per_step="
                                     f"{self.passes} backward passes before step(); call step() after every "
                                     f"{self.passes}")
        self._seen[key] = seen + 1
        return seen + 1 == self.passes

    def underway(self):
        """The most passes any parameter has had since the last step."""
        return max(self._seen.values(), default=0)

    def check_step(self):
        """Raises when the step comes after some passes but fewer than the count."""
        most = self.underway()
        if 0 < most < self.passes:
            raise Error("bad_job", f"step() after {most} of backward_passes_per_step={self.passes} backward passes; "
                                   f"call backward() {self.passes} times before each step() (the {most} so far are "
                                   "kept)")

    def check_zero_grad(self):
        """Raises when zero_grad() would drop passes accumulated for the coming step."""
        most = self.underway()
        if self.passes > 1 and most > 0:
            raise Error("bad_job", f"zero_grad() after {most} of backward_passes_per_step={self.passes} backward "
                                   "passes would drop the gradients accumulated for this step; call it after step()")

    def reset(self):
        self._seen = {}
