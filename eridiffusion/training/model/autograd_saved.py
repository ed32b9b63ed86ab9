"""Autograd through model code that later writes in place into a tensor autograd saved.

ComfyUI 0.3.75's LTX-Video block normalizes `x` (rms_norm saves it for backward) and then calls
`x.addcmul_(...)`, an explicit in-place write the out-of-place assignment patch cannot reach;
backward would then refuse ("modified by an inplace operation"). Inside this context each
saved activation is stored as a copy, so later writes cannot touch it. It costs one copy of
every saved activation (frozen weights are not copied), so only families that need it use it.
"""

import torch


def _pack(tensor):
    if tensor.requires_grad or tensor.grad_fn is not None:
        return tensor.clone()
    return tensor


def _unpack(tensor):
    return tensor


def saved_activations_copied():
    """Context: autograd saves copies of activations instead of the tensors themselves."""
    return torch.autograd.graph.saved_tensors_hooks(_pack, _unpack)
