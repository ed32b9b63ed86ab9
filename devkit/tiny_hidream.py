"""The tiny HiDream-I1 stack: ComfyUI's HiDream DiT, its four encoders (clip_l, clip_g, t5xxl, Llama 3.1)
and a 16-channel TAESD; see tiny_stack."""

import comfy.supported_models_base
import comfy.text_encoders.hidream

from devkit.detected_configs import detected_model_config
from devkit.tiny_stack import LLAMA_TINY, T5_TINY, TinyFamily, taesd_stack
from eridiffusion.tiny_models import CLIP_G, CLIP_L

# HiDream-I1 (model_detection: "caption_projection.0.linear.weight"): detection looks only for that
# key and hard-codes the full model, of which the tiny one keeps the patching, channels, resolution
# and 4 routed experts (2 active); it cuts 16 double + 32 single MoE blocks of 20 heads of 128 to
# 2 + 2 blocks of 2 heads of 16, the rope axes in proportion (8:4:4 for 64:32:32). llama_layers picks,
# per block, which Llama layer's hidden states it reads; caption_channels are [T5 width, Llama
# width]; text_emb_dim is the clip_l + clip_g pooled width.
HIDREAM_LAYOUT = {"caption_projection.0.linear.weight": (2 * 16, T5_TINY["d_model"])}
HIDREAM_SHRINK = {
    "num_layers": 2,
    "num_single_layers": 2,
    "num_attention_heads": 2,
    "attention_head_dim": 16,
    "axes_dims_rope": [8, 4, 4],
    "llama_layers": [0, 1, 1, 1],
    "caption_channels": [T5_TINY["d_model"], LLAMA_TINY["hidden_size"]],
    "text_emb_dim": CLIP_L["hidden_size"] + CLIP_G["hidden_size"],
}


def tiny_hidream(seed: int = 0):
    """HiDream: ComfyUI's HiDream DiT, its four encoders (clip_l, clip_g, t5xxl, Llama 3.1) and a
    16-channel TAESD (the real VAE is Flux's)."""
    model_config = detected_model_config(HIDREAM_LAYOUT, HIDREAM_SHRINK, "HiDream")
    # supported_models.HiDream has no clip_target; comfy.sd builds this one when given all four files.
    clip_target = comfy.supported_models_base.ClipTarget(
        comfy.text_encoders.hidream.HiDreamTokenizer, comfy.text_encoders.hidream.hidream_clip()
    )
    te_options = {
        "clip_l_model_config": CLIP_L,
        "clip_g_model_config": CLIP_G,
        "t5xxl_model_config": T5_TINY,
        "llama_model_config": LLAMA_TINY,
    }
    return taesd_stack(model_config, clip_target, te_options, 16, seed)


FAMILIES = {"hidream": TinyFamily(tiny_hidream, family="HiDream-I1")}
