"""ComfyUI 0.2x's dynamic VRAM, switched on as its server does by default on NVIDIA, for the GPU
checks and benchmarks (it cannot be switched off again in a process).

    python -m devkit.dynamic_vram   # the check below, in a process of its own
"""

import json
import os
import sys


def load_aimdo():
    """ComfyUI's allocator hooks for dynamic VRAM: before torch is imported, as ComfyUI's main.py
    loads them (DYNAMIC_VRAM=0, or a host without them: nothing)."""
    if os.environ.get("DYNAMIC_VRAM") == "0":
        return
    try:
        import comfy_aimdo.control
    except ImportError:
        return
    comfy_aimdo.control.init()


def enable_dynamic_vram():
    """After load_aimdo() and the host's start: loaders then give ModelPatcherDynamic patchers,
    whose weights stream to the GPU on demand. Returns whether it is on (DYNAMIC_VRAM=0, a host
    without it, or no CUDA device: off)."""
    import comfy.model_management as mm
    import comfy.model_patcher
    import torch

    if os.environ.get("DYNAMIC_VRAM") == "0" or not hasattr(comfy.model_patcher, "ModelPatcherDynamic"):
        return False
    if not torch.cuda.is_available():
        return False
    import comfy.memory_management
    import comfy_aimdo.control

    if not comfy_aimdo.control.init_devices([d.index for d in mm.get_all_torch_devices()]):
        return False
    comfy.model_patcher.CoreModelPatcher = comfy.model_patcher.ModelPatcherDynamic
    comfy.memory_management.aimdo_enabled = True
    return True


def text_encoder_training_check():
    """A CLIP-L loaded as CLIPLoader loads it (a file, comfy.sd.load_clip) under dynamic VRAM, its
    text encoder set up for training: which module tree encodes, and which adapters one
    encoding's gradient reaches. Returns a JSON-able dict."""
    import comfy.sd
    import comfy.supported_models
    import folder_paths
    import safetensors.torch
    import torch

    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.model.text_encoder import TextEncoderTraining
    from eridiffusion.training.model.tiny_models import text_encoder

    dynamic = enable_dynamic_vram()
    clip_target = comfy.supported_models.SD15({}).clip_target()
    source = text_encoder(clip_target, torch.Generator().manual_seed(0), {})
    path = os.path.join(folder_paths.get_temp_directory(), "clip_l.safetensors")  # (goes with the host's folders)
    state = source.cond_stage_model.clip_l.transformer.state_dict()
    safetensors.torch.save_file({k: v.to(torch.float16).contiguous() for k, v in state.items()}, path)
    clip = comfy.sd.load_clip([path], clip_type=comfy.sd.CLIPType.STABLE_DIFFUSION)

    training = TextEncoderTraining(clip, AdapterSpec(rank=4, alpha=4.0, targets="all-linear"), seed=0)
    cond, extra = training.conditioning("a photo of sks dog")[0]
    loss = cond.float().square().mean() + extra["pooled_output"].float().square().mean()
    if loss.requires_grad:  # (not when the encoding ran modules that hold no adapter)
        loss.backward()
    ups = [p for name, p in training.adapters.named_parameters() if name.endswith("up.weight")]
    return {
        "dynamic_vram": dynamic,
        "input_clip_dynamic": clip.is_dynamic(),
        "encodes_with_its_patchers_model": training.clip.cond_stage_model is training.clip.patcher.model,
        "encoding_has_gradient": loss.requires_grad,
        "adapters": len(ups),
        "adapters_with_gradient": sum(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in ups),
    }


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    load_aimdo()
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-dynamic-")
    print("RESULT " + json.dumps(text_encoder_training_check()))
