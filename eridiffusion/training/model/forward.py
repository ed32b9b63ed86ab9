"""One forward of the model being trained, as ComfyUI's sampler runs it: the transformer options
(with the patcher's wrappers and callbacks) and the autograd guards for ComfyUI's
in-place code."""

import contextlib

import comfy.patcher_extension

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


def prediction(base_model, transformer_options, x_t, sigma, inputs, copy_saved=False):
    """ComfyUI's denoised estimate of `x_t` at `sigma` (apply_model) with autograd through it.

    The frozen model runs in its own compute dtype, as ComfyUI's sampler runs it (no autocast): the
    adapters cast their fp32 weights to the activations' dtype. Autocast would instead up-cast every
    norm and softmax to fp32 and back, a fifth more time and 1.5 GiB more for SDXL at 1024² with
    CUDA graphs (bench/results/2026-11-24_autocast_h100.json), for the same losses."""
    # out-of-place residual adds: Flux/MMDiT blocks write `x += ...` into tensors autograd saved.
    with OutOfPlaceAugmentedAssignments(), saved_activations_copied() if copy_saved else contextlib.nullcontext():
        return base_model.apply_model(x_t, sigma, transformer_options=dict(transformer_options), **inputs)


def token_count(latent, diffusion_model, default_patch):
    """Tokens of a (B, C, [T,] h, w) latent, or an audio model's (B, C, t), as the model patchifies it:
    Flux's shift input. The spatial patch is the model's own `patch_size` where it has one (int or
    (t, h, w))."""
    patch = getattr(diffusion_model, "patch_size", None) or default_patch
    if isinstance(patch, (tuple, list)):
        patch = patch[-1]
    if latent.ndim == 3:
        return latent.shape[-1] // patch
    frames = latent.shape[2] if latent.ndim == 5 else 1
    return frames * (latent.shape[-2] // patch) * (latent.shape[-1] // patch)
