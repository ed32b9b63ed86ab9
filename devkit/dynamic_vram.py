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
    # the server's default verbosity (INFO); left at the library's own, comfy-aimdo 0.4.10 logs every
    # allocation and free to stdout, which slowed eager steps several times over (bench/ab_step_times.sh)
    if hasattr(comfy_aimdo.control, "set_log_info"):
        comfy_aimdo.control.set_log_info()
    comfy.model_patcher.CoreModelPatcher = comfy.model_patcher.ModelPatcherDynamic
    comfy.memory_management.aimdo_enabled = True
    return True


def text_encoder_training_check():
    """A CLIP-L loaded as CLIPLoader loads it (a file, comfy.sd.load_clip) under dynamic VRAM, its
    text encoder set up for training: which module tree encodes, and which adapters one
    encoding's gradient reaches. Returns a JSON-able dict."""
    import comfy.model_management
    import comfy.sd
    import comfy.supported_models
    import folder_paths
    import safetensors.torch
    import torch

    from eridiffusion.tiny_models import text_encoder
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.model.text_encoder import TextEncoderTraining

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


def fp16_tiny_sdxl(seed, disable_dynamic=False):
    """The tiny SDXL with fp16 weights and no manual cast, as ComfyUI's loaders give an SDXL
    checkpoint on NVIDIA: in the dynamic-VRAM patcher loaders make (unless `disable_dynamic`), with
    the recipe ComfyUI's clone(disable_dynamic=True) reloads it by."""
    import comfy.model_management as mm
    import comfy.model_patcher
    import comfy.supported_models
    import torch

    from eridiffusion.tiny_models import HEADS, SDXL_UNET, init_weights

    config = comfy.supported_models.SDXL({**SDXL_UNET, **HEADS})
    config.set_inference_dtype(torch.float16, None)
    model = config.get_model({})
    init_weights(model, torch.Generator().manual_seed(seed))
    model.eval()
    kind = comfy.model_patcher.ModelPatcher if disable_dynamic else comfy.model_patcher.CoreModelPatcher
    patcher = kind(model, load_device=mm.get_torch_device(), offload_device=mm.unet_offload_device())
    patcher.cached_patcher_init = (fp16_tiny_sdxl, (seed,))
    return patcher


def held_weights_check(datasets_dir):
    """A tiny SDXL as CheckpointLoaderSimple loads one under dynamic VRAM (fp16 on NVIDIA), trained
    in bf16: the input MODEL's and the result MODEL's weight dtypes after the run, and how many fp16
    tensors the run's steps cast (ComfyUI's per-forward cast of each weight). Returns a JSON-able dict."""
    import folder_paths
    import torch

    from devkit.tiny_models import build_tiny
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.data.dataset import load_dataset
    from eridiffusion.training.data.training_data import build_training_data
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.trainer import train_lora

    dynamic = enable_dynamic_vram()
    _, clip, vae = build_tiny("sdxl", seed=0)
    model = fp16_tiny_sdxl(0)
    dataset = load_dataset(os.path.join(datasets_dir, "dreambooth_dog"))
    with torch.inference_mode():
        data = build_training_data(dataset, vae, clip, 64, os.path.join(folder_paths.get_temp_directory(), "cache"))
    # eager steps, so that every op of every step passes the counter
    config = TrainConfig(
        steps=4,
        dtype="bf16",
        cuda_graphs="off",
        gradient_checkpointing=False,
        log_every=1,
        eval_images=1,
        adapter=AdapterSpec(rank=4, alpha=4.0),
        run_name="held",
    )
    casts = []

    class Counting(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.ops.aten._to_copy.default and kwargs.get("dtype", args[0].dtype) != args[0].dtype:
                casts.append(str(args[0].dtype))
            return func(*args, **kwargs)

    with Counting():
        result = train_lora(model, data, config, os.path.join(folder_paths.get_temp_directory(), "run"))
    return {
        "dynamic_vram": dynamic,
        "input_model_dynamic": model.is_dynamic(),
        "weights": sum(1 for _ in model.model.diffusion_model.parameters()),
        "input_weight_dtypes": sorted({str(p.dtype) for p in model.model.diffusion_model.parameters()}),
        "result_weight_dtypes": sorted({str(p.dtype) for p in result.patcher.model.diffusion_model.parameters()}),
        "fp16_casts_while_training": casts.count("torch.float16"),
        "losses": result.losses,
    }


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    load_aimdo()
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-dynamic-")
    if sys.argv[1:2] == ["held_weights"]:
        print("RESULT " + json.dumps(held_weights_check(sys.argv[2])))
    else:
        print("RESULT " + json.dumps(text_encoder_training_check()))
