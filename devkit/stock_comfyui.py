"""A trained LoRA as stock ComfyUI sees it: loaded through its own LoRA loader (with the keys it
refuses), and a fixed probe input to compare model outputs exactly."""

import contextlib
import logging

import comfy.model_management
import comfy.sd
import comfy.utils
import torch


def load_with_stock_comfyui(model, path, strength, caplog, clip=None, clip_strength=0.0):
    """ComfyUI's own LoRA loading path (what LoraLoader does), collecting its key warnings: (the patched
    model, its key warnings), or with `clip` (the patched model, the patched CLIP, its key warnings)."""
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        lora = comfy.utils.load_torch_file(path)
        patched, patched_clip = comfy.sd.load_lora_for_models(model, clip, lora, strength, clip_strength)
    unmatched = [
        r.getMessage()
        for r in caplog.records
        if "lora key not loaded" in r.getMessage() or "NOT LOADED" in r.getMessage()
    ]
    return (patched, unmatched) if clip is None else (patched, patched_clip, unmatched)


def merged_tolerance(patcher, on_the_cpu=1e-4, on_a_gpu=3e-3):
    """Relative error allowed between a LoRA applied by LoraLoader (merged into the weights) and the
    trained bypass: on the CPU ComfyUI computes in fp32 and they agree to `on_the_cpu`; on a GPU it
    computes in half precision (casting fp32 weights as it goes), which rounds the merged weight
    (DoRA's, normalized per column after the merge, by up to 0.7% on the H100: `on_a_gpu`)."""
    return on_the_cpu if patcher.load_device.type == "cpu" else on_a_gpu


@contextlib.contextmanager
def merging_in_fp32(device):
    """Stock ComfyUI merging a LoRA into fp32 weights in fp32 on `device`, and fp32 products there, for a
    comparison with the trained bypass to the CPU's tolerance: on a GPU ComfyUI 0.2x merges LoRA patches
    in fp16 (model_management.lora_compute_dtype), rounding each merged weight by up to 2^-11, and
    cuDNN's convolutions round fp32 inputs to TF32 by default; either puts the two ~1e-3 apart on
    outputs that agree to 1e-6 when both are exact."""
    device = torch.device(device)
    merges = getattr(comfy.model_management, "LORA_COMPUTE_DTYPES", None)  # (0.3.x merges in fp32)
    flags = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    before = None if merges is None else merges.get(device)
    if merges is not None:
        merges[device] = torch.float32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = flags
        if merges is not None:
            if before is None:
                merges.pop(device, None)
            else:
                merges[device] = before


def relative_error(a, b):
    return ((a - b).norm() / b.norm()).item()


def denoised(patcher, sample, conditioning=None, options=None, references=(), sigma=0.7, seed=3):
    """`patcher`'s estimate of TrainingSample `sample`'s clean latent (model space) from its latent
    noised to `sigma` with fixed noise (`seed`), loaded as ComfyUI loads it (its adapters with it);
    the inputs are its first caption's conditioning (or `conditioning`), with conditioning `options`
    and reference latents `references` added as the trainer adds them."""
    from eridiffusion.training.model.inputs import batch_inputs, model_inputs

    comfy.model_management.load_models_gpu([patcher], force_full_load=True)
    base = patcher.model
    x = base.process_latent_in(sample.latent[None].float())
    conditioning = sample.conditionings[0] if conditioning is None else conditioning
    inputs = batch_inputs(
        [model_inputs(base, conditioning, x[0], "cpu", sample.bucket, options, reference_latents=references)]
    )
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
    s = torch.tensor([sigma])
    with torch.inference_mode():
        return base.apply_model(base.model_sampling.noise_scaling(s, noise, x), s, **inputs).float()


class ProbeInput:
    """A fixed noisy latent, sigma and conditioning to compare model outputs exactly."""

    def __init__(self, x, sigma, inputs):
        self.x, self.sigma, self.inputs = x, sigma, inputs

    @classmethod
    def of(cls, model, data):

        from eridiffusion.training.model.inputs import batch_inputs, model_inputs
        from eridiffusion.training.model.prepared_data import model_latent

        base = model.model
        sample = data.samples[0]
        latent, layout = model_latent(base, sample)  # (audio-video: the video and audio latents packed)
        values = {**sample.conditioning_values, **layout}
        inputs = batch_inputs(
            [model_inputs(base, sample.conditionings[0], latent, "cpu", sample.bucket, values=values)]
        )
        latent = latent[None]
        noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(7))
        ms = base.model_sampling
        sigma = torch.tensor([float(ms.percent_to_sigma(0.6))])  # 40% of the way from noise to image
        return cls(ms.noise_scaling(sigma, noise, latent), sigma, inputs)

    def output(self, patcher):
        import comfy.model_management

        from eridiffusion.comfy_compat import clear_prefix_cache

        with torch.inference_mode():
            comfy.model_management.load_models_gpu([patcher], force_full_load=True)
            # HiDream-O1 caches its prompt's keys and values on the modules its patchers share, keyed by the
            # prompt alone: stock ComfyUI would give the base model the K/V a LoRA'd clone computed before
            clear_prefix_cache(patcher.model)
            device = patcher.load_device  # (the probe is made on the CPU; a GPU run computes there)
            inputs = {name: v.to(device) if isinstance(v, torch.Tensor) else v for name, v in self.inputs.items()}
            out = patcher.model.apply_model(self.x.to(device), self.sigma.to(device), **inputs)
            return out.float().cpu().clone()


def layer_deltas(path):
    """{layer prefix: ΔW} of every lora_up/lora_down layer of a LoRA file as ComfyUI's LoRA adapter
    computes it: alpha/rank · up @ down, a conv's kernel in down's columns (flattened)."""
    import safetensors.torch

    tensors = safetensors.torch.load_file(path)
    deltas = {}
    for key, down in tensors.items():
        if key.endswith(".lora_down.weight"):
            prefix = key[: -len(".lora_down.weight")]
            up = tensors[f"{prefix}.lora_up.weight"].float()
            rank = down.shape[0]
            alpha = float(tensors.get(f"{prefix}.alpha", rank))
            deltas[prefix] = (up.flatten(1) @ down.float().flatten(1)) * (alpha / rank)
    return deltas


def tiny_demo_lora_load(path, caplog):
    """LoRA file `path` loaded by stock ComfyUI onto the tiny demo SDXL (eridiffusion.tiny_models), as a
    LoraLoader loads it: (the "lora key not loaded" messages `caplog` saw, the layers it patched, the
    lora_down layers the file has)."""
    import comfy.sd
    import comfy.utils

    from eridiffusion.tiny_models import build_tiny_demo

    lora = comfy.utils.load_torch_file(str(path), safe_load=True)
    model, clip, _ = build_tiny_demo("sdxl", seed=0)
    caplog.clear()
    patched, _ = comfy.sd.load_lora_for_models(model, clip, lora, 1.0, 1.0)
    unmatched = [r.getMessage() for r in caplog.records if "lora key not loaded" in r.getMessage()]
    return unmatched, len(patched.patches), sum(k.endswith(".lora_down.weight") for k in lora)
