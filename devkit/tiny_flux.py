"""The tiny stacks on ComfyUI's Flux DiT: FLUX.1 [dev] (also how Kontext loads), [schnell], Fill,
and LongCat-Image, which ComfyUI loads as a Flux with a Qwen2.5-VL text input; see tiny_stack."""

import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_stack import LLAMA_TINY, T5_TINY, TinyFamily, qwen25_vl_text_encoder, taesd_stack
from eridiffusion.tiny_models import CLIP_L, diffusion_model, taesd_vae

# The state-dict layouts ComfyUI's model detection reads (detected_configs): 2 double + 2 single
# blocks, 64 wide; detection's full-size head count and rope axes are cut to 2 heads of 32.
FLUX_WIDTH = 64
FLUX_BLOCKS = {
    "double_blocks.0.img_attn.norm.key_norm.scale": (FLUX_WIDTH // 2,),
    **blocks("double_blocks", 2),
    **blocks("single_blocks", 2),
}
FLUX_DEV_LAYOUT = {
    **FLUX_BLOCKS,
    "img_in.weight": (FLUX_WIDTH, 16 * 2 * 2),
    "txt_in.weight": (FLUX_WIDTH, T5_TINY["d_model"]),
    "vector_in.in_layer.weight": (FLUX_WIDTH, CLIP_L["hidden_size"]),
    "guidance_in.in_layer.weight": (FLUX_WIDTH, 256),
}
FLUX_SCHNELL_LAYOUT = {k: v for k, v in FLUX_DEV_LAYOUT.items() if not k.startswith("guidance_in.")}
FLUX_SHRINK = {"num_heads": 2, "axes_dim": [8, 12, 12]}
# FLUX.1 Fill as detection reads it: Flux dev's layout whose img_in takes 16 + 16 + 64 channels
# (noise, masked image latent, the mask unshuffled 8x8) in 2x2 patches.
FLUX_FILL_LAYOUT = {**FLUX_DEV_LAYOUT, "img_in.weight": (FLUX_WIDTH, (16 + 16 + 64) * 2 * 2)}


def flux1_stack(model_config, seed):
    """A FLUX.1 stack of `model_config`: its Flux DiT, clip_l + t5xxl and a 16-channel TAESD."""
    te_options = {"clip_l_model_config": CLIP_L, "t5xxl_model_config": T5_TINY}
    return taesd_stack(model_config, model_config.clip_target(), te_options, 16, seed)


def tiny_flux_dev(seed: int = 0):
    """FLUX.1 [dev] (also how Kontext loads): ComfyUI's Flux with guidance embedding, clip_l + t5xxl."""
    return flux1_stack(detected_model_config(FLUX_DEV_LAYOUT, FLUX_SHRINK, "Flux"), seed)


def tiny_flux_schnell(seed: int = 0):
    """FLUX.1 [schnell]: ComfyUI's FluxSchnell (no guidance embedding, shift 1), clip_l + t5xxl."""
    return flux1_stack(detected_model_config(FLUX_SCHNELL_LAYOUT, FLUX_SHRINK, "FluxSchnell"), seed)


def tiny_flux_fill(seed: int = 0):
    """FLUX.1 Fill [dev]: ComfyUI's FluxInpaint (Flux with guidance embedding and the inpainting input
    channels), clip_l + t5xxl, a 16-channel TAESD."""
    return flux1_stack(detected_model_config(FLUX_FILL_LAYOUT, FLUX_SHRINK, "FluxInpaint"), seed)


# LongCat-Image (model_detection's Flux branch): ComfyUI tells it from FLUX.1 schnell only by its
# 3584-wide text input (Qwen2.5-VL-7B's hidden size) with no pooled vector, so txt_in and the
# encoder stay 3584 wide (its 152064 x 3584 embedding is most of the stack); the Flux blocks are
# FLUX.1's 2 double + 2 single, 64 wide.
LONGCAT_CONTEXT = 3584
LONGCAT_LAYOUT = {
    **FLUX_BLOCKS,
    "img_in.weight": (FLUX_WIDTH, 16 * 2 * 2),
    "txt_in.weight": (FLUX_WIDTH, LONGCAT_CONTEXT),
}


def tiny_longcat_image(seed: int = 0):
    """LongCat-Image: ComfyUI's Flux DiT as LongCatImage (text rope ids, no guidance), its
    Qwen2.5-VL-7B encoder (3 layers of one head, real width), and a 16-channel TAESD (the real VAE
    is Flux's)."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(LONGCAT_LAYOUT, FLUX_SHRINK, "LongCatImage")
    model = diffusion_model(config, generator)
    clip = qwen25_vl_text_encoder(
        config.clip_target(), generator, {"qwen25_7b_model_config": {**LLAMA_TINY, "hidden_size": LONGCAT_CONTEXT}}
    )
    return model, clip, taesd_vae(16, config.latent_format, generator)


FAMILIES = {
    "flux_dev": TinyFamily(
        tiny_flux_dev, family="Flux.1 dev (and Flex-style variants)", steps=100, learning_rate=3e-3, resolution=128
    ),
    "flux_schnell": TinyFamily(
        tiny_flux_schnell, family="Flux.1 schnell", steps=100, learning_rate=3e-3, resolution=128
    ),
    "flux_kontext": TinyFamily(
        tiny_flux_dev, family="Flux.1 Kontext (edit pairs)", steps=100, learning_rate=3e-3, resolution=128
    ),
    "flux_fill": TinyFamily(tiny_flux_fill, family="Flux.1 Fill (inpainting)", steps=100, resolution=128, inpaint=True),
    "longcat_image": TinyFamily(
        tiny_longcat_image, family="LongCat-Image", steps=100, needs=("LongCatImage",), since="0.28.0"
    ),
}
