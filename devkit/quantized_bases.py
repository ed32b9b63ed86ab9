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
    return fp8_scaled(dict(diffusion_model.state_dict()), layers)


def fp8_scaled(state, layers):
    """`state` (a dict of tensors, changed in place and returned) with the Linear `layers` (names) stored as
    an fp8_scaled file stores them."""
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


def tiny_clip_fp8(model, clip, encoder, te_options, scaled=False, tokenizer_data=None):
    """The tiny `clip` with its `encoder` (e.g. "t5xxl") stored as users' fp8 files store it and loaded
    through ComfyUI's own detection (the model config's clip_target reads the file's dtype and per-layer
    quantization): `scaled` off, every tensor float8 (t5xxl_fp8_e4m3fn: manual_cast layers); on, the
    linear layers fp8_scaled with `comfy_quant` entries (…_fp8_scaled, ComfyUI 0.28: mixed-precision
    layers holding QuantizedTensors). `te_options`, `tokenizer_data`: what the tiny clip was built with."""
    import comfy.sd

    stored = clip.get_sd()
    ours = f"{encoder}.transformer."
    part = {k.removeprefix(ours): v for k, v in stored.items() if k.startswith(ours)}
    if scaled:
        module = getattr(clip.cond_stage_model, encoder).transformer
        layers = [
            name for name, m in module.named_modules() if isinstance(m, torch.nn.Linear) and f"{name}.weight" in part
        ]
        part = fp8_scaled_state_dict(module, layers)
    else:
        part = {name: tensor.to(torch.float8_e4m3fn) for name, tensor in part.items()}
    stored = {k: v for k, v in stored.items() if not k.startswith(ours)} | {ours + k: v for k, v in part.items()}
    config = model.model.model_config
    target = config.clip_target(state_dict={config.text_encoder_key_prefix[0] + k: v for k, v in stored.items()})
    options = {"model_options": {"dtype": torch.float32, **te_options}, "tokenizer_data": tokenizer_data or {}}
    with torch.inference_mode():  # (as CLIPLoader runs)
        if "state_dict" in inspect.signature(comfy.sd.CLIP).parameters:  # (0.28 loads as it builds)
            return comfy.sd.CLIP(target=target, state_dict=stored, **options)
        loaded = comfy.sd.CLIP(target=target, **options)
        loaded.load_sd(stored, full_model=True)
        return loaded
