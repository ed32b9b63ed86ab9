"""A tiny model that ComfyUI's CheckpointLoaderSimple loads back from a checkpoint on every tested host:
its detection picks SD1.5 by the 320-wide first level and 768-wide text context alone (the other tiny
stacks are narrower), so this SD1.5 UNet keeps those two widths with one level of one block (26M
weights), beside a TAESD; a random LoRA of it, and a probe of its output."""

import torch

from eridiffusion.tiny_models import SD15_UNET, diffusion_model, taesd_vae

CONTEXT = 768
LOADABLE_SD15 = {
    **SD15_UNET,
    "model_channels": 320,
    "context_dim": CONTEXT,
    "channel_mult": [1],
    "num_res_blocks": [1],
    "transformer_depth": [1],
    "transformer_depth_output": [1, 1],
    "transformer_depth_middle": 1,
}


def loadable_sd15(seed=0):
    """(ModelPatcher, VAE) of an SD1.5 CheckpointLoaderSimple can load back."""
    import comfy.supported_models

    generator = torch.Generator().manual_seed(seed)
    config = comfy.supported_models.SD15(dict(LOADABLE_SD15))
    return diffusion_model(config, generator), taesd_vae(4, config.latent_format, generator)


def random_lora(patcher, path, rank=4, seed=1):
    """A LoRA file in ComfyUI's keys with random factors for every linear weight of `patcher`'s model."""
    import safetensors.torch

    from eridiffusion.formats.lora_file import loadable_weight_keys

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


def unet_output(patcher):
    """The model's prediction on a fixed noisy latent and text context."""
    import comfy.model_management

    generator = torch.Generator().manual_seed(7)
    x = torch.randn(1, 4, 8, 8, generator=generator)
    context = torch.randn(1, 77, CONTEXT, generator=generator)
    with torch.inference_mode():
        comfy.model_management.load_models_gpu([patcher], force_full_load=True)
        device = patcher.load_device
        out = patcher.model.apply_model(
            x.to(device), torch.tensor([5.0], device=device), c_crossattn=context.to(device)
        )
    return out.float().cpu().clone()
