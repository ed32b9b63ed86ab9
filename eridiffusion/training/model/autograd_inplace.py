"""Autograd through model code that writes `x += f(x)`.

ComfyUI's model code adds residuals in place (`x += self.self_attn(...)` in CLIP, `img += ...` in
Flux's double/single blocks, `x += ...` in MMDiT), modifying a tensor autograd saved for the
backward pass, which backward then refuses. While this context is active and grad mode is on,
an augmented assignment (+=, -=, *=, /=) on a tensor computes its result as a new tensor, which
Python binds to the name: the values are the same, the saved tensor is left alone.

Only the augmented-assignment operators change (they are looked up on torch.Tensor, which the
context patches); explicit in-place calls such as `sim.add_(mask)` or `out.mul_(w)`, which code
relies on to mutate a tensor every reference sees, stay in place. With grad mode off
(sampling, evaluation) nothing changes. The patch is process-wide while any thread is inside the
context; it is re-entrant (gradient checkpointing enters it again inside each recomputed block,
which runs in the backward pass, outside the forward's context).
"""

import threading

import torch

_OUT_OF_PLACE = {
    "__iadd__": torch.Tensor.add,
    "__isub__": torch.Tensor.sub,
    "__imul__": torch.Tensor.mul,
    "__itruediv__": torch.Tensor.div,
}
_lock = threading.Lock()
_depth = 0
_saved: dict = {}  # the operators replaced while a block runs: {name: the original}


def _augmented(name, out_of_place):
    in_place = getattr(torch.Tensor, name)

    def method(self, other):
        if not torch.is_grad_enabled():
            return in_place(self, other)
        result = out_of_place(self, other)
        if result.shape != self.shape:
            return in_place(self, other)  # in place it cannot broadcast: raise what torch raises
        # in place keeps the tensor's dtype (bf16 += fp32 stays bf16)
        return result if result.dtype == self.dtype else result.to(self.dtype)

    method.__name__ = name
    return method


def _install():
    for name, out_of_place in _OUT_OF_PLACE.items():
        _saved[name] = torch.Tensor.__dict__.get(name)  # None: inherited from the C base class
        setattr(torch.Tensor, name, _augmented(name, out_of_place))


def _restore():
    for name, original in _saved.items():
        if original is None:
            delattr(torch.Tensor, name)
        else:
            setattr(torch.Tensor, name, original)
    _saved.clear()


class OutOfPlaceAugmentedAssignments:
    """Context: augmented assignments on tensors run out of place while grad mode is on."""

    def __enter__(self):
        global _depth
        with _lock:
            if _depth == 0:
                _install()
            _depth += 1
        return self

    def __exit__(self, *exc):
        global _depth
        with _lock:
            _depth -= 1
            if _depth == 0:
                _restore()
        return False
