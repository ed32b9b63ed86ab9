"""The tiny Chroma stacks: Chroma (Flux blocks modulated from a distilled guidance approximator, its
PixArt-style t5xxl encoder, a 16-channel TAESD) and Chroma Radiance (Chroma in pixel space with a
NeRF patch decoder, on ComfyUI's pixel-space VAE); see tiny_stack."""

import torch

from devkit.detected_configs import detected_model_config
from devkit.tiny_flux import FLUX_BLOCKS, FLUX_SHRINK, FLUX_WIDTH
from devkit.tiny_stack import T5_TINY, TinyFamily, taesd_stack, unit_norm_scales
from devkit.tiny_vaes import pixel_space_vae
from eridiffusion.tiny_models import diffusion_model, text_encoder

# Chroma patchifies inside the model (in_channels 64 = 16 x 2 x 2) and modulates from its
# distilled guidance approximator (here 2 layers of 64 instead of 5 of 5120) instead of a pooled
# text vector.
CHROMA_LAYOUT = {
    **FLUX_BLOCKS,
    "img_in.weight": (FLUX_WIDTH, 64),
    "txt_in.weight": (FLUX_WIDTH, T5_TINY["d_model"]),
    "distilled_guidance_layer.norms.0.scale": (FLUX_WIDTH,),
}
CHROMA_SHRINK = {**FLUX_SHRINK, "out_dim": FLUX_WIDTH, "hidden_dim": FLUX_WIDTH, "n_layers": 2}


def tiny_chroma(seed: int = 0):
    """Chroma: ComfyUI's Chroma DiT and its PixArt-style t5xxl text encoder, a 16-channel TAESD."""
    config = detected_model_config(CHROMA_LAYOUT, CHROMA_SHRINK, "Chroma")
    return taesd_stack(config, config.clip_target(), {"t5xxl_model_config": T5_TINY}, 16, seed)


# Chroma Radiance (model_detection's Chroma branch with NeRF blocks and no img_in): Chroma's 2 double
# + 2 single blocks, 64 wide, and its distilled guidance approximator shrunk as tiny_chroma's; the
# image enters through img_in_patch, a conv whose kernel side detection reads as the patch size (the
# real 16, so a 128 px image is 8x8 tokens) and a NeRF head decodes each patch's pixels from its
# token. Detection hard-codes the head: cut from 4 blocks of width 64 to 2 of 32 (the DCT features,
# nerf_max_freqs 8, stay real); the conv final head of current checkpoints (its norm key's presence).
# No "__x0__" key: the velocity-predicting form (x0 checkpoints load as the same class, their forward
# turning x0 into the velocity ComfyUI samples with).
RADIANCE_PATCH = 16
CHROMA_RADIANCE_LAYOUT = {
    **FLUX_BLOCKS,
    "img_in_patch.weight": (FLUX_WIDTH, 3, RADIANCE_PATCH, RADIANCE_PATCH),
    "txt_in.weight": (FLUX_WIDTH, T5_TINY["d_model"]),
    "distilled_guidance_layer.norms.0.scale": (FLUX_WIDTH,),
    "nerf_blocks.0.norm.scale": (1,),
    "nerf_final_layer_conv.norm.scale": (1,),
}
CHROMA_RADIANCE_SHRINK = {**CHROMA_SHRINK, "nerf_hidden_size": 32, "nerf_depth": 2}


def tiny_chroma_radiance(seed: int = 0):
    """Chroma Radiance: ComfyUI's ChromaRadiance DiT (Chroma in pixel space with a NeRF patch
    decoder), Chroma's T5-XXL encoder, and ComfyUI's pixel-space VAE."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(CHROMA_RADIANCE_LAYOUT, CHROMA_RADIANCE_SHRINK, "ChromaRadiance")
    model = diffusion_model(config, generator)
    dit = model.model.diffusion_model
    # The NeRF head decodes through its norms into a 3x3 conv (not a linear layer: no adapter on it).
    unit_norm_scales(dit.nerf_blocks, dit.nerf_final_layer_conv)
    clip = text_encoder(config.clip_target(), generator, {"t5xxl_model_config": T5_TINY})
    return model, clip, pixel_space_vae()


FAMILIES = {
    "chroma": TinyFamily(tiny_chroma, family="Chroma", steps=100, learning_rate=3e-3, resolution=128),
    "chroma_radiance": TinyFamily(tiny_chroma_radiance, family="Chroma Radiance", steps=100, needs=("ChromaRadiance",)),
}
