"""An exponential moving average of the trained weights (a Trained's parameters), kept on the device
beside them and updated after each optimizer step with one fused op over all of them
(torch._foreach_lerp_): no Python loop over parameters and no read-back in the step."""

import contextlib

import torch


class AdapterEMA:
    """shadow ← decay·shadow + (1 − decay)·weights after every step, starting from the weights.
    With `warmup` > 0 the decay ramps up linearly over that many steps (early steps follow the
    weights closely, as the first weights are far from where the run goes)."""

    def __init__(self, parameters, decay, warmup=0):
        self.parameters = list(parameters)
        self.decay, self.warmup, self.updates = decay, warmup, 0
        with torch.no_grad():
            self.shadow = [p.detach().clone() for p in self.parameters]

    def decay_at(self, update):
        """The decay of the `update`-th update (1 for the first)."""
        return self.decay * min(1.0, update / self.warmup) if self.warmup else self.decay

    @torch.no_grad()
    def update(self):
        self.updates += 1
        torch._foreach_lerp_(self.shadow, self.parameters, 1.0 - self.decay_at(self.updates))

    @contextlib.contextmanager
    def applied(self):
        """The averaged weights in the parameters for the block (sampling, validation, export),
        the trained ones back afterwards, in place (CUDA graphs keep their addresses)."""
        with torch.no_grad():
            trained = torch._foreach_mul(self.parameters, 1.0)  # a copy, in one op
            torch._foreach_copy_(self.parameters, self.shadow)
        try:
            yield
        finally:
            with torch.no_grad():
                torch._foreach_copy_(self.parameters, trained)

    @torch.no_grad()
    def copy_to_parameters(self):
        """Make the averaged weights the trained ones for good (the run's result)."""
        torch._foreach_copy_(self.parameters, self.shadow)

    def state(self):
        return {"shadow": [t.detach() for t in self.shadow], "updates": self.updates}

    @torch.no_grad()
    def load_state(self, state):
        torch._foreach_copy_(self.shadow, [t.to(s.device, s.dtype) for t, s in zip(state["shadow"], self.shadow)])
        self.updates = state["updates"]
