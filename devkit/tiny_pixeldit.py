"""The tiny PixelDiT text-to-image stack: ComfyUI's PixDiT_T2I, its Gemma-2 2B encoder (on a borrowed
sentencepiece model) and ComfyUI's pixel-space VAE; see tiny_stack."""

import torch

from devkit.detected_configs import detected_model_config
from devkit.tiny_stack import LLAMA_TINY, TinyFamily, borrowed_spiece_model, unit_norm_scales
from devkit.tiny_vaes import pixel_space_vae
from eridiffusion.tiny_models import diffusion_model, text_encoder

# PixelDiT text-to-image (model_detection: "core.pixel_embedder.proj.weight"): detection reads only
# that the key exists, so every size is the PixDiT_T2I default (1536 wide in 24 groups, 14 patch
# blocks over 16x16-pixel patches, 2 pixel blocks with 16-wide pixel tokens attending 1152 wide in
# 16 heads, 2304-wide Gemma-2 2B text). Tiny: 64 wide in two groups of 32, 2 patch blocks and one
# pixel block attending 32 wide in two heads; the 16x16 patches, 16-wide pixel tokens and the
# 300-token text position table stay real; the text width is the tiny Gemma-2's.
PIXELDIT_LAYOUT = {"core.pixel_embedder.proj.weight": (1,)}
PIXELDIT_SHRINK = {
    "hidden_size": 64,
    "num_groups": 2,
    "patch_depth": 2,
    "pixel_depth": 1,
    "pixel_attn_hidden_size": 32,
    "pixel_num_groups": 2,
    "txt_embed_dim": LLAMA_TINY["hidden_size"],
}


def tiny_pixeldit(seed: int = 0):
    """PixelDiT T2I: ComfyUI's PixDiT_T2I (an MMDiT over 16x16 patches whose pixel blocks decode each
    patch's pixels), its Gemma-2 2B encoder (with PixelDiT's prompt template; Gemma's tokenizer
    model borrowed as for Lumina 2) and ComfyUI's pixel-space VAE."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(PIXELDIT_LAYOUT, PIXELDIT_SHRINK, "PixelDiTT2I")
    model = diffusion_model(config, generator)
    dit = model.model.diffusion_model
    # The pixel tokens pass through the pixel blocks' and final layer's norms on their way out.
    unit_norm_scales(dit.pixel_blocks, dit.final_layer)
    clip = text_encoder(
        config.clip_target(), generator, {"gemma2_2b_model_config": LLAMA_TINY}, borrowed_spiece_model()
    )
    return model, clip, pixel_space_vae()


FAMILIES = {
    "pixeldit": TinyFamily(tiny_pixeldit, family="PixelDiT", steps=100, needs=("PixelDiTT2I",), since="0.28.0"),
}
