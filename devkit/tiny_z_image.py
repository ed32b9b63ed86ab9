"""The tiny Z-Image stacks: Z-Image (ComfyUI's NextDiT with Z-Image modulation, the Qwen3-4B encoder,
a 16-channel TAESD) and Z-Image pixel space (the same backbone with a per-patch MLP pixel decoder, on
ComfyUI's pixel-space VAE); see tiny_stack."""

import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_lumina2 import LUMINA2_BLOCKS
from devkit.tiny_stack import LLAMA_TINY, TinyFamily, detected_at_full_width, taesd_stack
from devkit.tiny_vaes import pixel_space_vae
from eridiffusion.tiny_models import diffusion_model, text_encoder

# Z-Image (the Lumina 2 layout at width 3840, by which detection and the ZImage class know it):
# z_image_modulation, time_scale 1000, the real rope axes, lengths and theta 256 as detected. The
# width is then cut to 256, no lower: the timestep embedding is 256 wide and the modulation layers
# read min(dim, 256) of it. Two heads of the real 128 (real: 30); the feed-forward is cut to 512
# (ffn_dim_multiplier 0.5 instead of 8/3) to keep the run short. No cap_pad_token key, so no
# caption padding tokens.
Z_IMAGE_LAYOUT = {**LUMINA2_BLOCKS, "cap_embedder.1.weight": (3840, LLAMA_TINY["hidden_size"])}
Z_IMAGE_SHRINK = {"dim": 256, "n_heads": 2, "n_kv_heads": 2, "ffn_dim_multiplier": 0.5}


def tiny_z_image(seed: int = 0):
    """Z-Image: ComfyUI's NextDiT with Z-Image modulation, the Qwen3-4B encoder and a 16-channel
    TAESD (the real VAE is Flux's)."""
    model_config = detected_at_full_width(Z_IMAGE_LAYOUT, Z_IMAGE_SHRINK, "ZImage")
    return taesd_stack(model_config, model_config.clip_target(), {"qwen3_4b_model_config": LLAMA_TINY}, 16, seed)


# Z-Image pixel space (model_detection's Z-Image branch with a dec_net decoder): detection knows
# Z-Image by its 3840-wide cap_embedder, so the layout carries that width; the rest of the layout
# gives the pixel decoder as detection reads it: the patch side from x_embedder (16 over RGB here,
# so a 128 px image is 8x8 tokens), a 64-wide MLP decoder (real: the model width) of 2 residual
# blocks with the 8x8 DCT features of the real one. The backbone is then cut as tiny_z_image's
# (256 wide, no lower: the modulation reads min(dim, 256) of the 256-wide timestep embedding).
Z_IMAGE_PIXEL_PATCH = 16
Z_IMAGE_PIXEL_DECODER = 64
_Z_IMAGE_PATCH_VALUES = Z_IMAGE_PIXEL_PATCH**2 * 3
Z_IMAGE_PIXEL_LAYOUT = {
    **Z_IMAGE_LAYOUT,
    "x_embedder.weight": (3840, _Z_IMAGE_PATCH_VALUES),
    "dec_net.cond_embed.weight": (Z_IMAGE_PIXEL_DECODER, 3840),
    "dec_net.final_layer.linear.weight": (_Z_IMAGE_PATCH_VALUES, Z_IMAGE_PIXEL_DECODER),
    "dec_net.input_embedder.embedder.0.weight": (Z_IMAGE_PIXEL_DECODER, _Z_IMAGE_PATCH_VALUES + 8**2),
    **blocks("dec_net.res_blocks", 2),
}


def tiny_z_image_pixel_space(seed: int = 0):
    """Z-Image pixel space: ComfyUI's NextDiTPixelSpace (Z-Image's backbone with a per-patch MLP
    pixel decoder, predicting x0), Z-Image's Qwen3-4B encoder, and ComfyUI's pixel-space VAE."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(Z_IMAGE_PIXEL_LAYOUT, Z_IMAGE_SHRINK, "ZImagePixelSpace")
    model = diffusion_model(config, generator)
    clip = text_encoder(config.clip_target(), generator, {"qwen3_4b_model_config": LLAMA_TINY})
    return model, clip, pixel_space_vae()


FAMILIES = {
    "z_image": TinyFamily(tiny_z_image, family="Z-Image"),
    "z_image_pixel_space": TinyFamily(
        tiny_z_image_pixel_space,
        family="Z-Image pixel space",
        steps=100,
        needs=("ZImagePixelSpace",),
        since="0.28.0",
    ),
}
