"""Turns cached CLIP conditionings into the extra inputs a ComfyUI model takes (`c_crossattn`,
`y`, …) through the model's own `extra_conds`, as ComfyUI's sampler does, once per sample."""

import torch


def _on_device(cond, device):
    value = cond.cond
    if isinstance(value, torch.Tensor):
        return cond._copy_with(value.to(device, copy=True))  # a copy also leaves inference mode
    if isinstance(value, list):
        return cond._copy_with([v.to(device, copy=True) if isinstance(v, torch.Tensor) else v for v in value])
    return cond


def model_inputs(base_model, conditioning, latent, device, pixel_size=None, defaults=None, reference_latents=()):
    """{name: ComfyUI cond object} for one sample; `latent` is (C, h, w) or (C, t, h, w) in model
    space, `pixel_size` the (width, height) of the image it encodes (default: 8x the latent),
    `defaults` conditioning options used where the conditioning has none (e.g. guidance),
    `reference_latents` the sample's edit references (VAE space), which reach any model whose
    extra_conds reads "reference_latents" (Flux Kontext, Flux.2, Qwen-Image Edit)."""
    cond, options = conditioning[0]
    params = dict(defaults or {})
    params.update(options)
    if reference_latents:  # edit models, as ComfyUI's ReferenceLatent node appends them (VAE space, batch 1)
        params["reference_latents"] = list(params.get("reference_latents", [])) + [r[None] for r in reference_latents]
    width, height = pixel_size or (latent.shape[-1] * 8, latent.shape[-2] * 8)
    # latent_shapes: as ComfyUI's sampler passes it for a plain (not nested) latent; models that
    # take several latents at once (LTX-2's video + audio) read the video-only case from it.
    params.update(
        cross_attn=cond,
        noise=latent[None],
        device=device,
        prompt_type="positive",
        width=params.get("width", width),
        height=params.get("height", height),
        latent_shapes=[latent[None].shape],
    )
    conds = base_model.extra_conds(**params)
    return {
        name: _on_device(c.process_cond(batch_size=1, area=None, device=device), device) for name, c in conds.items()
    }


def batch_inputs(per_sample):
    """Keyword arguments for `apply_model` from the inputs of the samples of one batch."""
    first, rest = per_sample[0], per_sample[1:]
    if not rest:
        return {name: c.cond for name, c in first.items()}
    return {name: c.concat([other[name] for other in rest]) for name, c in first.items()}
