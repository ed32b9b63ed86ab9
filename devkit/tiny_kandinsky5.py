"""The tiny Kandinsky 5 stacks: Kandinsky 5.0 Image Lite (a 16-channel TAESD) and Kandinsky 5.0 Video
Lite (the HunyuanVideo VAE it decodes with), each ComfyUI's Kandinsky5 DiT with its Qwen2.5-VL-7B +
clip_l encoders; see tiny_stack."""

import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_hunyuan_video import tiny_hunyuan_video_vae
from devkit.tiny_stack import LLAMA_TINY, LLAMA_TINY_4_LAYERS, VIDEO_FRAMES, TinyFamily, qwen25_vl_text_encoder
from eridiffusion.tiny_models import CLIP_L, diffusion_model, taesd_vae

# Kandinsky 5.0 Image Lite (model_detection "visual_transformer_blocks.0.cross_attention.key_norm"):
# supported_models tells the image model from the video Kandinsky5 by model_dim 2560 with a 64-wide
# visual embedding (16 latent channels x 1x2x2 patch), so the layout is detected 2560 wide, and the
# class it picks is then built 64 wide (KANDINSKY5_IMAGE_REFIT: two heads of 32, rope axes 8:12:12;
# at 2560 the stack had 165M weights and trained at ~2 s a step on the CPU); 2 visual + 2 text blocks,
# a 64-wide feed-forward and time embedding. The text widths are not detected: they follow the tiny
# Qwen2.5-VL (in_text_dim) and CLIP-L pooled output (in_text_dim2).
KANDINSKY5_IMAGE_WIDTH = 2560
KANDINSKY5_HEAD = 128
KANDINSKY5_IMAGE_LAYOUT = {
    "visual_embeddings.in_layer.weight": (KANDINSKY5_IMAGE_WIDTH, 16 * 2 * 2),
    "visual_embeddings.in_layer.bias": (KANDINSKY5_IMAGE_WIDTH,),
    "time_embeddings.in_layer.bias": (64,),
    "visual_transformer_blocks.0.cross_attention.key_norm.weight": (KANDINSKY5_HEAD,),
    "visual_transformer_blocks.0.feed_forward.in_layer.weight": (64, KANDINSKY5_IMAGE_WIDTH),
    **blocks("visual_transformer_blocks", 2),
    **blocks("text_transformer_blocks", 2),
}
KANDINSKY5_IMAGE_SHRINK = {"in_text_dim": LLAMA_TINY["hidden_size"], "in_text_dim2": CLIP_L["hidden_size"]}
KANDINSKY5_IMAGE_REFIT = {"model_dim": 64, "axes_dims": (8, 12, 12)}


def tiny_kandinsky5_image(seed: int = 0):
    """Kandinsky 5.0 Image Lite: ComfyUI's Kandinsky5 DiT as Kandinsky5Image, its Qwen2.5-VL-7B +
    CLIP-L encoder, and a 16-channel TAESD (the real VAE is Flux's AutoencoderKL, whose encoder
    ComfyUI builds 128 wide whatever the checkpoint)."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(
        KANDINSKY5_IMAGE_LAYOUT, KANDINSKY5_IMAGE_SHRINK, "Kandinsky5Image", refit=KANDINSKY5_IMAGE_REFIT
    )
    model = diffusion_model(config, generator)
    clip = qwen25_vl_text_encoder(
        config.clip_target(), generator, {"qwen25_7b_model_config": LLAMA_TINY, "clip_l_model_config": CLIP_L}
    )
    return model, clip, taesd_vae(16, config.latent_format, generator)


# Kandinsky 5 Video Lite (model_detection "visual_transformer_blocks.0.cross_attention.key_norm"):
# 2 text + 2 visual blocks 64 wide (real: 2 + 32 of 1792). The visual embedding reads 132 = 4 x 33
# values per 1x2x2 patch: 16 latent channels, 16 of (empty) first-frame latent and a mask channel
# (model_base.Kandinsky5.concat_cond). Detection sets the rope axes only for the real widths, so
# they are cut to 8:12:12 (real 16:24:24): two heads of 32. The text widths are not detected: the
# Qwen2.5-VL hidden states and the clip_l pooled vector of the tiny encoders.
KANDINSKY5_WIDTH = 64
KANDINSKY5_LAYOUT = {
    "visual_transformer_blocks.0.cross_attention.key_norm.weight": (32,),
    "visual_embeddings.in_layer.weight": (KANDINSKY5_WIDTH, 132),
    "visual_embeddings.in_layer.bias": (KANDINSKY5_WIDTH,),
    "time_embeddings.in_layer.bias": (32,),
    "visual_transformer_blocks.0.feed_forward.in_layer.weight": (2 * KANDINSKY5_WIDTH, KANDINSKY5_WIDTH),
    **blocks("text_transformer_blocks", 2),
    **blocks("visual_transformer_blocks", 2),
}
KANDINSKY5_SHRINK = {
    "axes_dims": (8, 12, 12),
    "in_text_dim": LLAMA_TINY_4_LAYERS["hidden_size"],
    "in_text_dim2": CLIP_L["hidden_size"],
}


def tiny_kandinsky5(seed: int = 0):
    """Kandinsky 5 Video: ComfyUI's Kandinsky5 DiT, its Qwen2.5-VL-7B + clip_l encoders and the
    HunyuanVideo VAE it decodes with."""
    generator = torch.Generator().manual_seed(seed)
    model_config = detected_model_config(KANDINSKY5_LAYOUT, KANDINSKY5_SHRINK, "Kandinsky5")
    model = diffusion_model(model_config, generator)
    clip = qwen25_vl_text_encoder(
        model_config.clip_target(),
        generator,
        {"qwen25_7b_model_config": LLAMA_TINY_4_LAYERS, "clip_l_model_config": CLIP_L},
    )
    return model, clip, tiny_hunyuan_video_vae(generator)


FAMILIES = {
    "kandinsky5_image": TinyFamily(
        tiny_kandinsky5_image, family="Kandinsky 5.0 Image Lite", steps=100, needs=("Kandinsky5Image",), since="0.28.0"
    ),
    "kandinsky5": TinyFamily(
        tiny_kandinsky5,
        family="Kandinsky 5.0 Video (Lite, Pro)",
        video_frames=VIDEO_FRAMES,
        needs=("Kandinsky5",),
        since="0.28.0",
    ),
}
