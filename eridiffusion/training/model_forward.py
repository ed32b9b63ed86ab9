"""One forward of the model being trained, as ComfyUI's sampler runs it: the transformer options
(with the patcher's wrappers and callbacks), autocast, and the autograd guards for ComfyUI's
in-place code."""

import contextlib

import comfy.patcher_extension
import torch

from .autograd_inplace import OutOfPlaceAugmentedAssignments
from .autograd_saved import saved_activations_copied


def transformer_options_of(patcher):
    """The transformer_options a forward of `patcher` runs with: its model options' and, as
    ComfyUI's sampler adds them (sampler_helpers.prepare_model_patcher), the patcher's wrappers
    and callbacks (torch.compile, other nodes' model wrappers)."""
    options = dict(patcher.model_options.get("transformer_options", {}))
    for name, extra in (("wrappers", patcher.wrappers), ("callbacks", patcher.callbacks)):
        options[name] = comfy.patcher_extension.merge_nested_dicts(dict(options.get(name, {})), extra)
    return options


def prediction(base_model, transformer_options, x_t, sigma, inputs, dtype, cast_cache=True, copy_saved=False):
    """ComfyUI's denoised estimate of `x_t` at `sigma` (apply_model) with autograd through it."""
    # out-of-place residual adds: Flux/MMDiT blocks write `x += ...` into tensors autograd saved.
    # (A CUDA graph capture needs autocast's cast cache off: cached casts would outlive the capture.)
    with (
        torch.autocast(x_t.device.type, dtype=dtype, enabled=dtype != torch.float32, cache_enabled=cast_cache),
        OutOfPlaceAugmentedAssignments(),
        saved_activations_copied() if copy_saved else contextlib.nullcontext(),
    ):
        return base_model.apply_model(x_t, sigma, transformer_options=dict(transformer_options), **inputs)


def token_count(latent, diffusion_model, default_patch):
    """Tokens of a (B, C, [T,] h, w) latent as the model patchifies it: Flux's shift input. The
    spatial patch is the model's own `patch_size` where it has one (int or (t, h, w))."""
    patch = getattr(diffusion_model, "patch_size", None) or default_patch
    if isinstance(patch, (tuple, list)):
        patch = patch[-1]
    frames = latent.shape[2] if latent.ndim == 5 else 1
    return frames * (latent.shape[-2] // patch) * (latent.shape[-1] // patch)
