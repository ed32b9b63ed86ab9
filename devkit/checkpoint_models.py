"""A tiny model that ComfyUI's CheckpointLoaderSimple loads back from a checkpoint: its detection derives
Flux's head count from the width (1 head of 128 at 128 wide), which the other tiny stacks cut below, so
this Flux.1-dev is 128 wide with 1 double and 1 single block, beside a TAESD; and a probe of its output."""

import torch

import devkit.tiny_models  # noqa: F401  (loads the tiny stacks in their order)
from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_flux import CLIP_L, T5XXL
from eridiffusion.training.model.tiny_models import diffusion_model, taesd_vae

WIDTH = 128
LAYOUT = {
    "double_blocks.0.img_attn.norm.key_norm.scale": (WIDTH,),
    **blocks("double_blocks", 1),
    **blocks("single_blocks", 1),
    "img_in.weight": (WIDTH, 16 * 2 * 2),
    "txt_in.weight": (WIDTH, T5XXL["d_model"]),
    "vector_in.in_layer.weight": (WIDTH, CLIP_L["hidden_size"]),
    "guidance_in.in_layer.weight": (WIDTH, 256),
}


def loadable_flux(seed=0):
    """(ModelPatcher, VAE) of a Flux.1-dev CheckpointLoaderSimple can load back."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(LAYOUT, None, "Flux")
    return diffusion_model(config, generator), taesd_vae(16, config.latent_format, generator)


def random_lora(patcher, path, rank=4, seed=1):
    """A LoRA file in ComfyUI's keys with random factors for every 2-D weight of `patcher`'s model."""
    import safetensors.torch

    from eridiffusion.training.formats.lora_file import loadable_weight_keys

    generator = torch.Generator().manual_seed(seed)
    weights = patcher.model.state_dict()
    tensors = {}
    for key, prefix in sorted(loadable_weight_keys(patcher.model).items()):
        if key not in weights or weights[key].dim() != 2:
            continue
        out_features, in_features = weights[key].shape
        tensors[f"{prefix}.lora_down.weight"] = torch.randn(rank, in_features, generator=generator) * 0.1
        tensors[f"{prefix}.lora_up.weight"] = torch.randn(out_features, rank, generator=generator) * 0.1
        tensors[f"{prefix}.alpha"] = torch.tensor(float(rank) / 2)
    safetensors.torch.save_file(tensors, path)
    return path


def flux_output(patcher):
    """The model's prediction on a fixed noisy latent, text and guidance."""
    import comfy.model_management

    generator = torch.Generator().manual_seed(7)
    x = torch.randn(1, 16, 8, 8, generator=generator)
    context = torch.randn(1, 4, T5XXL["d_model"], generator=generator)
    pooled = torch.randn(1, CLIP_L["hidden_size"], generator=generator)
    with torch.inference_mode():
        comfy.model_management.load_models_gpu([patcher], force_full_load=True)
        out = patcher.model.apply_model(
            x, torch.tensor([0.6]), c_crossattn=context, y=pooled, guidance=torch.tensor([3.5])
        )
    return out.float().cpu().clone()
