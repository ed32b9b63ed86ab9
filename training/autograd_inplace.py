"""Autograd through model code that writes `x += f(x)`.

ComfyUI's CLIP text encoders add each layer's residual in place (`x += self.self_attn(...)`),
modifying a tensor autograd saved for the backward pass, which backward then refuses. Inside
this mode, in-place arithmetic on a tensor that takes part in autograd runs out of place; the
augmented assignment rebinds its name to the result, so the values computed are the same.

Python reports `x += y` to torch as `x.add_(y)`, so the two cannot be told apart: the mode is
only correct for code whose in-place arithmetic on such tensors is all augmented assignment.
That holds for ComfyUI's CLIP (checked in comfy/clip_model.py and comfy/sd1_clip.py), which is
where it is used.
"""
import torch
from torch.overrides import TorchFunctionMode

_OUT_OF_PLACE = {
    torch.Tensor.add_: torch.Tensor.add,
    torch.Tensor.sub_: torch.Tensor.sub,
    torch.Tensor.mul_: torch.Tensor.mul,
    torch.Tensor.div_: torch.Tensor.div,
}


def _tracked(value):
    return isinstance(value, torch.Tensor) and (value.requires_grad or value.grad_fn is not None)


class OutOfPlaceAugmentedAssignments(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        replacement = _OUT_OF_PLACE.get(func)
        if replacement is not None and torch.is_grad_enabled() and args and _tracked(args[0]):
            return replacement(*args, **kwargs)
        return func(*args, **kwargs)
