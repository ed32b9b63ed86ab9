"""Tiny models whose weights are quantized the way users' checkpoints are and loaded the way ComfyUI
loads them: an fp8_scaled SD1.5 (per-layer `comfy_quant` entries, float8_e4m3fn weights with a
`weight_scale`), built through the same steps as comfy.sd.load_diffusion_model_state_dict after its
detection (the tiny config replaces what detection would read from a full-size file). Import once
ComfyUI is on sys.path."""

import contextlib
import inspect
import json

import comfy.model_management as mm
import comfy.model_patcher
import comfy.supported_models
import comfy.utils
import torch

from eridiffusion.tiny_models import HEADS, SD15_UNET, tiny_sd15

# the hosts whose loader reads per-layer quantization (ComfyUI 0.28's mixed-precision ops)
LOADS_PER_LAYER_QUANTIZATION = hasattr(comfy.utils, "detect_layer_quantization")


@contextlib.contextmanager
def products_in_full_precision(patcher):
    """`patcher`'s quantized layers computing with their weights dequantized (as on a CPU) for an exact
    comparison: on a GPU with fp8 compute ComfyUI quantizes each layer's input to fp8, and that rounding
    (up to 6% of an element) turns differences of fp16's size between two models into ~3% of the output."""
    layers = [m for m in patcher.model.modules() if hasattr(m, "_full_precision_mm")]
    before = [m._full_precision_mm for m in layers]
    for m in layers:
        m._full_precision_mm = True
    try:
        yield
    finally:
        for m, value in zip(layers, before):
            m._full_precision_mm = value


def fp8_scaled_state_dict(diffusion_model, layers):
    """The state dict of `diffusion_model` with the Linear `layers` (names) stored as an fp8_scaled file
    stores them: float8_e4m3fn weights, a per-tensor float32 `weight_scale`, and a `comfy_quant` entry."""
    state = dict(diffusion_model.state_dict())
    quant = torch.tensor(list(json.dumps({"format": "float8_e4m3fn"}).encode()), dtype=torch.uint8)
    for name in layers:
        weight = state[f"{name}.weight"].float()
        scale = weight.abs().max().clamp(min=1e-12) / torch.finfo(torch.float8_e4m3fn).max
        state[f"{name}.weight"] = (weight / scale).to(torch.float8_e4m3fn)
        state[f"{name}.weight_scale"] = scale.reshape(())
        state[f"{name}.comfy_quant"] = quant.clone()
    return state


def tiny_sd15_fp8_scaled(seed=0):
    """(MODEL, CLIP, VAE): tiny_sd15's stack with the Linear layers of its transformer blocks fp8_scaled,
    loaded as ComfyUI 0.28 loads such a checkpoint (MixedPrecisionOps layers holding QuantizedTensors),
    under inference mode as its loader nodes run (stock ComfyUI cannot move a QuantizedTensor made outside
    it while loading under it: 'Cannot set version_counter for inference tensor')."""
    with torch.inference_mode():
        return _tiny_sd15_fp8_scaled(seed)


def _tiny_sd15_fp8_scaled(seed):
    model, clip, vae = tiny_sd15(seed)
    layers = [
        name
        for name, module in model.model.diffusion_model.named_modules()
        if isinstance(module, torch.nn.Linear) and ".transformer_blocks." in name
    ]
    state = fp8_scaled_state_dict(model.model.diffusion_model, layers)
    config = comfy.supported_models.SD15(dict(SD15_UNET))
    config.unet_config.update(HEADS)
    config.quant_config = comfy.utils.detect_layer_quantization(state, "")
    device = mm.get_torch_device()
    config.set_inference_dtype(
        torch.float32, mm.unet_manual_cast(None, device, config.supported_inference_dtypes), device=device
    )
    base = config.get_model(state, "")
    base.load_model_weights(state, "")
    patcher = comfy.model_patcher.ModelPatcher(base, load_device=device, offload_device=mm.unet_offload_device())
    return patcher, clip, vae


def tiny_flux_clip_fp8(clip, scaled=False):
    """The tiny Flux `clip` with its T5 stored as users' files store it and loaded through ComfyUI's own
    detection (comfy.sd's t5xxl_detect): t5xxl_fp8_e4m3fn (every tensor float8, manual_cast layers) or,
    `scaled`, t5xxl_fp8_e4m3fn_scaled (per-layer `comfy_quant` entries: mixed-precision layers holding
    QuantizedTensors; ComfyUI 0.28's loader). CLIP-L stays as it was."""
    import comfy.sd
    import comfy.text_encoders.flux
    import comfy.text_encoders.sd3_clip
    from comfy.supported_models_base import ClipTarget

    from devkit.tiny_flux import T5_TINY
    from eridiffusion.tiny_models import CLIP_L

    t5 = clip.cond_stage_model.t5xxl.transformer
    if scaled:
        layers = [name for name, module in t5.named_modules() if isinstance(module, torch.nn.Linear)]
        state = fp8_scaled_state_dict(t5, layers)
    else:
        state = {name: tensor.to(torch.float8_e4m3fn) for name, tensor in t5.state_dict().items()}
    detected = comfy.text_encoders.sd3_clip.t5_xxl_detect(state)
    target = ClipTarget(comfy.text_encoders.flux.FluxTokenizer, comfy.text_encoders.flux.flux_clip(**detected))
    options = {"dtype": torch.float32, "clip_l_model_config": CLIP_L, "t5xxl_model_config": T5_TINY}
    files = [clip.cond_stage_model.clip_l.transformer.state_dict(), state]  # (clip_l.safetensors, the T5 file)
    with torch.inference_mode():  # (as CLIPLoader runs)
        if "state_dict" in inspect.signature(comfy.sd.CLIP).parameters:  # (0.28 loads as it builds)
            return comfy.sd.CLIP(target=target, state_dict=files, model_options=options)
        loaded = comfy.sd.CLIP(target=target, model_options=options)
        for file in files:
            loaded.load_sd(file)
        return loaded
