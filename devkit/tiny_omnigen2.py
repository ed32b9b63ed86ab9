"""The tiny OmniGen2 stacks: OmniGen2 (ComfyUI's OmniGen2 transformer, the Qwen2.5-VL-3B language model)
and Boogu-Image (OmniGen2 with a dual-stream stage, the Qwen3-VL-8B encoder), each with a 16-channel
TAESD; see tiny_stack."""

import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_stack import LLAMA_TINY, TinyFamily, qwen3_vl_text_encoder, taesd_stack
from eridiffusion.tiny_models import diffusion_model, taesd_vae

# OmniGen2 (model_detection: "time_caption_embed.timestep_embedder.linear_1.bias"): detection looks
# only for that key and hard-codes the full model, of which the tiny one keeps the patching,
# channels, rope lengths, feed-forward rounding and the 2 refiner layers; it cuts 32 layers of
# 2520 (21 heads of 120, 7 kv heads) to 2 of 48 (two heads of 24, one kv head) in three equal rope
# axes as the real ones; text_feat_dim is the tiny Qwen2.5-3B width.
OMNIGEN2_LAYOUT = {"time_caption_embed.timestep_embedder.linear_1.bias": (48,)}
OMNIGEN2_SHRINK = {
    "num_layers": 2,
    "hidden_size": 48,
    "num_attention_heads": 2,
    "num_kv_heads": 1,
    "axes_dim_rope": [8, 8, 8],
    "text_feat_dim": LLAMA_TINY["hidden_size"],
}


def tiny_omnigen2(seed: int = 0):
    """OmniGen2: ComfyUI's OmniGen2 transformer, the Qwen2.5-VL-3B language model and a 16-channel
    TAESD (the real VAE is Flux's)."""
    model_config = detected_model_config(OMNIGEN2_LAYOUT, OMNIGEN2_SHRINK, "Omnigen2")
    return taesd_stack(model_config, model_config.clip_target(), {"qwen25_3b_model_config": LLAMA_TINY}, 16, seed)


# Boogu-Image (model_detection "double_stream_layers.0.img_instruct_attn.processor.img_to_q.weight"):
# OmniGen2 with a dual-stream stage. Detection reads the width from x_embedder (48 here, real 3360
# over 16 latent channels x 2x2 patch), counts the single-stream, double-stream and refiner layers
# (2, 2, 2 here; real 32, 8, 2) and reads the instruction width from the caption embedder's norm
# (the tiny Qwen3-VL-8B width, real 4096); heads and rope are the model's defaults, cut as
# tiny_omnigen2's (two heads of 24 sharing one key/value head, three equal rope axes).
BOOGU_WIDTH = 48
BOOGU_LAYOUT = {
    "double_stream_layers.0.img_instruct_attn.processor.img_to_q.weight": (1,),
    "x_embedder.weight": (BOOGU_WIDTH, 16 * 2 * 2),
    "time_caption_embed.caption_embedder.0.weight": (LLAMA_TINY["hidden_size"],),
    **blocks("single_stream_layers", 2),
    **blocks("double_stream_layers", 2),
    **blocks("noise_refiner", 2),
}
BOOGU_SHRINK = {"num_attention_heads": 2, "num_kv_heads": 1, "axes_dim_rope": [8, 8, 8]}


def tiny_boogu(seed: int = 0):
    """Boogu-Image: ComfyUI's BooguTransformer2DModel, its Qwen3-VL-8B encoder (last hidden state;
    vision tower zeroed: it reads only image prompts) and a 16-channel TAESD (the real VAE is
    Flux's, as OmniGen2's)."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(BOOGU_LAYOUT, BOOGU_SHRINK, "Boogu")
    model = diffusion_model(config, generator)
    clip = qwen3_vl_text_encoder(config.clip_target(), generator, {"qwen3vl_8b_model_config": LLAMA_TINY})
    return model, clip, taesd_vae(16, config.latent_format, generator)


FAMILIES = {
    "omnigen2": TinyFamily(tiny_omnigen2, family="OmniGen2"),
    "boogu": TinyFamily(tiny_boogu, family="Boogu-Image", steps=100, needs=("Boogu",), since="0.28.0"),
}
