"""Lets autograd run through a ComfyUI model without copying or changing its weights.

ComfyUI loads models under torch.inference_mode, and autograd refuses to save such tensors
for backward. While training, each frozen parameter is swapped for a non-inference alias of
the same memory (requires_grad off), and so is each buffer made at load time (ACE-Step 1.5's
rotary cos/sin tables); a quantized weight (a tensor subclass) is remade from aliases of its parts.
The originals come back when ComfyUI unpatches.
"""

from typing import Any

import comfy.patcher_extension
import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

INJECTION_KEY = "eridiffusion_autograd_weights"


def _alias(tensor):
    if is_traceable_wrapper_subclass(tensor):  # a quantized weight (ComfyUI's QuantizedTensor): its parts'
        names, context = tensor.__tensor_flatten__()
        inner = {name: _alias(getattr(tensor, name)) for name in names}
        return type(tensor).__tensor_unflatten__(inner, context, tensor.size(), tensor.stride())
    view = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
    with torch.no_grad():
        view.set_(tensor.untyped_storage(), tensor.storage_offset(), tensor.size(), tensor.stride())
    return view


def _tracks_versions(tensor):
    """Whether autograd can track `tensor`'s in-place changes. A Parameter made under inference mode
    has no version counter and keeps none when `.data` later gets a normal tensor outside it (as
    `Module.to` does when ComfyUI moves a model it loaded): it no longer reports is_inference(), yet
    any view of it (`weight.t()` inside F.linear) raises 'Inference tensors do not track version counter'."""
    try:
        return tensor._version >= 0
    except RuntimeError:
        return False


def _swap_in_aliases(model, saved):
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None or not (param.is_inference() or param.requires_grad or not _tracks_versions(param)):
                continue
            saved.append((module._parameters, name, param))
            module._parameters[name] = torch.nn.Parameter(_alias(param), requires_grad=False)
        for name, buffer in list(module._buffers.items()):
            if buffer is None or not (buffer.is_inference() or not _tracks_versions(buffer)):
                continue
            saved.append((module._buffers, name, buffer))
            module._buffers[name] = _alias(buffer)


def frozen_weights_injection(patcher):
    """Register on a training clone: frozen, autograd-safe weights whenever it is patched."""
    # (the module's _parameters or _buffers, name, the original tensor) of each swapped tensor
    saved: list[tuple[dict[str, Any], str, torch.Tensor]] = []

    def inject(model_patcher):
        with torch.inference_mode(False):
            _swap_in_aliases(model_patcher.model, saved)

    def eject(model_patcher):
        for table, name, tensor in reversed(saved):
            table[name] = tensor
        saved.clear()

    patcher.set_injections(INJECTION_KEY, [comfy.patcher_extension.PatcherInjection(inject, eject)])
    return patcher
