"""Turns cached CLIP conditionings into the extra inputs a ComfyUI model takes (`c_crossattn`,
`y`, …) through the model's own `extra_conds`, as ComfyUI's sampler does, once per sample."""

import torch
import torch.nn.functional as F

from ...errors import EriDiffusionError


def _on_device(cond, device):
    """`cond` with its tensors copied to `device` (a copy also leaves inference mode). A copy from
    CPU memory to the GPU does not wait for the GPU (non_blocking: CUDA stages pageable memory
    before the call returns); one the other way does."""
    value = cond.cond
    non_blocking = torch.device(device).type != "cpu"
    if isinstance(value, torch.Tensor):
        return cond._copy_with(value.to(device, copy=True, non_blocking=non_blocking))
    if isinstance(value, list):
        return cond._copy_with(
            [v.to(device, copy=True, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v for v in value]
        )
    return cond


def model_inputs(
    base_model,
    conditioning,
    latent,
    device,
    pixel_size=None,
    defaults=None,
    reference_latents=(),
    pooled_on_device=True,
    values=None,
):
    """{name: ComfyUI cond object} for one sample; `latent` is (C, h, w) or (C, t, h, w) in model
    space, `pixel_size` the (width, height) of the image it encodes (default: 8x the latent),
    `defaults` conditioning options used where the conditioning has none (e.g. guidance),
    `reference_latents` the sample's edit references (VAE space), which reach any model whose
    extra_conds reads "reference_latents" (Flux Kontext, Flux.2, Qwen-Image Edit). `pooled_on_device`: a trained text
    encoder's pooled output joins the inputs on the device where it can (see _extra_conds). `values`:
    what a host node sets on the sample's conditioning (an image-to-video start image's
    concat_latent_image and concat_mask; an audio-video clip's frame_rate and the latent_shapes of its
    packed video and audio latents), laid over its options as that node lays them."""
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
    params.update(values or {})
    conds, live = _extra_conds(base_model, params, pooled_on_device)
    inputs = {}
    for name, c in conds.items():
        inputs[name] = _on_device(c.process_cond(batch_size=1, area=None, device=device), device)
        if name in live:
            value = inputs[name].cond
            pooled = live[name].to(value.device, value.dtype)
            inputs[name] = inputs[name]._copy_with(value + F.pad(pooled, (0, value.shape[-1] - pooled.shape[-1])))
    return inputs


def batch_inputs(per_sample):
    """Keyword arguments for `apply_model` from the inputs of the samples of one batch."""
    first, rest = per_sample[0], per_sample[1:]
    if not rest:
        return {name: c.cond for name, c in first.items()}
    for name, c in first.items():
        # ComfyUI pads cross-attention to a common length, but an input such as HiDream-O1's prompt ids
        # cannot be padded without changing what the model reads: such samples cannot share a batch
        if isinstance(c.cond, torch.Tensor) and not all(c.can_concat(other[name]) for other in rest):
            shapes = sorted({tuple(other[name].cond.shape) for other in per_sample})
            raise EriDiffusionError(
                f"the samples of one batch give this model's '{name}' input different shapes {shapes} "
                "(captions of different token lengths, for a model that reads the prompt's tokens "
                "themselves), which cannot be batched: set batch_size to 1 and use gradient_accumulation "
                "for a larger effective batch."
            )
    return {name: c.concat([other[name] for other in rest]) for name, c in first.items()}


def _extra_conds(base_model, params, pooled_on_device=True):
    """(base_model.extra_conds(**params), {name: the pooled output to add to that input}).

    While the text encoder trains, its pooled output is a GPU tensor with a gradient, and SDXL's
    extra_conds puts it before the image-size embeddings it makes on the CPU: moved to the CPU and
    the result back, forward and backward, each copy a wait for the GPU. Where an input takes the
    pooled output as it is in its leading entries (SDXL's `y`), it is made with a zero pooled output
    on the CPU and the live one is added on the GPU. Anything else (a model that transforms the
    pooled output or moves it to the GPU itself) gets the live one through extra_conds as always."""
    pooled = params.get("pooled_output")
    if not (pooled_on_device and isinstance(pooled, torch.Tensor) and pooled.requires_grad):
        return base_model.extra_conds(**params), {}
    probe = torch.arange(1, pooled.numel() + 1, dtype=torch.float32).reshape(pooled.shape)  # exact in fp32
    with_zeros = base_model.extra_conds(**{**params, "pooled_output": torch.zeros_like(probe)})
    with_probe = base_model.extra_conds(**{**params, "pooled_output": probe})
    live = {}
    for name, c in with_zeros.items():
        zero, probed = c.cond, getattr(with_probe.get(name), "cond", None)
        if zero is probed or (isinstance(zero, PLAIN) and type(zero) is type(probed) and zero == probed):
            continue
        if not _pooled_leads(zero, probed, probe):
            return base_model.extra_conds(**params), {}
        if (probed != zero).any():
            live[name] = pooled
    return with_zeros, live


PLAIN = (bool, int, float, str, type(None))


def _pooled_leads(zero, probed, probe):
    """Whether CPU tensors `zero` and `probed` (an input made with a zero and with the `probe` pooled
    output) differ by exactly the probe in their leading entries, or not at all."""
    if not all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in (zero, probed)):
        return False
    if zero.shape != probed.shape or zero.dim() == 0:
        return False
    width = probe.shape[-1]
    rows = (probed.float() - zero.float()).reshape(-1, zero.shape[-1])
    expected = probe.reshape(-1, width)
    if expected.shape[0] != rows.shape[0]:
        if expected.shape[0] != 1:
            return False
        expected = expected.expand(rows.shape[0], -1)
    if not rows.any():
        return True
    return rows.shape[-1] >= width and torch.equal(rows[:, :width], expected) and not rows[:, width:].any()


def check_takes_start_image(base_model, sample):
    """Refuse start images (TrainingSample `sample`, conditioned on one; None: no start image) that the
    model would ignore: a text-to-video model, whose inputs are the same with and without them."""
    if sample is None:
        return
    latent = base_model.process_latent_in(sample.latent[None].float())[0]
    if not takes_start_image(base_model, sample.conditionings[0], latent, sample.bucket, sample.conditioning_values):
        name = type(base_model.model_config).__name__
        raise EriDiffusionError(
            f"CacheLatents' start_image is on, but this model (ComfyUI's {name}) takes no start image: it is a "
            "text-to-video model. Load the image-to-video model (Wan 2.1 I2V, Wan 2.2 I2V 14B, HunyuanVideo 1.5 "
            "I2V), or turn start_image off."
        )


def takes_start_image(base_model, conditioning, latent, pixel_size, values):
    """Whether `base_model` reads an image-to-video start image's `values` (concat_latent_image,
    concat_mask, clip_vision_output): its inputs for `conditioning` and the model-space `latent`
    (C, t, h, w) differ with and without them."""
    with_image = model_inputs(base_model, conditioning, latent, "cpu", pixel_size, values=values)
    without = model_inputs(base_model, conditioning, latent, "cpu", pixel_size)
    return set(with_image) != set(without) or any(
        isinstance(c.cond, torch.Tensor) and not torch.equal(c.cond, without[name].cond)
        for name, c in with_image.items()
    )
