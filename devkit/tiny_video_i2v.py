"""Tiny random-init image-to-video stacks (Wan 2.1 I2V, Wan 2.2 I2V 14B, HunyuanVideo 1.5 I2V) built
from ComfyUI's own classes as tiny_video builds the text-to-video ones: each diffusion model's config
is what the host's model detection reads from the family's keys at tiny shapes. They train with
CacheLatents' start_image on (TinyFamily.start_image)."""

from devkit.detected_configs import detected_model_config
from devkit.tiny_models import TinyFamily
from devkit.tiny_video import (
    VIDEO_FRAMES,
    WAN_SHRINK,
    _wan_layout,
    _wan_stack,
    tiny_hunyuan_video15,
)
from devkit.tiny_video_vae import tiny_wan_vae

# Wan's image-to-video models take 36 channels in: the 16-channel latent, the 4-channel mask and the
# 16-channel start-image latent that model_base.WAN21.concat_cond lays beside it, 144 values per 2x2
# patch. The tiny ones are 160 wide (2 heads of 80), so the patch embedding can keep the start image
# apart from the noisy latent (32 wide, it mixes them beyond recovery and a LoRA cannot learn to follow it).
WAN_I2V_WIDTH = 160
_WAN_I2V_IN = {"patch_embedding.weight": (WAN_I2V_WIDTH, 36, 1, 2, 2)}
# Wan 2.2 I2V A14B: detected as "t2v" (no CLIP-vision embedding), so ComfyUI loads it as WAN21_T2V.
WAN22_I2V_LAYOUT = {**_wan_layout(16, WAN_I2V_WIDTH), **_WAN_I2V_IN}
# Wan 2.1 I2V: its CLIP-vision projection (img_emb, 1280 wide as detection builds it) makes it "i2v",
# loaded as WAN21_I2V.
WAN21_I2V_LAYOUT = {**WAN22_I2V_LAYOUT, "img_emb.proj.0.bias": (1280,)}


def tiny_wan21_i2v(seed: int = 0):
    """Wan 2.1 image-to-video: ComfyUI's WanModel (i2v), the umt5 encoder and a Wan 2.1 VAE."""
    return _wan_stack(detected_model_config(WAN21_I2V_LAYOUT, WAN_SHRINK, "WAN21_I2V"), tiny_wan_vae, seed)


def tiny_wan22_i2v(seed: int = 0):
    """Wan 2.2 I2V A14B (one expert): ComfyUI's WanModel on 36 channels in, the umt5 encoder and a Wan 2.1 VAE."""
    return _wan_stack(detected_model_config(WAN22_I2V_LAYOUT, WAN_SHRINK, "WAN21_T2V"), tiny_wan_vae, seed)


# The image encoders the image-to-video models read the start image's features from, as CLIPVisionLoader
# builds them from a config, at their real widths (what the models' image projections take: Wan 2.1 I2V's
# img_emb 1280, CLIP-ViT-H; HunyuanVideo 1.5's vision_in 1152, SigLIP) with two layers (the penultimate
# hidden state Wan reads is one) over 28-pixel images in 14-pixel patches (real: 32 / 27 layers, 224 / 384).
CLIP_VISION_TINY = {
    "wan": {"model_type": "clip_vision_model", "hidden_size": 1280, "hidden_act": "gelu", "projection_dim": 32},
    "hunyuan": {
        "model_type": "siglip_vision_model",
        "hidden_size": 1152,
        "hidden_act": "gelu_pytorch_tanh",
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    },
}


def tiny_clip_vision(kind, seed=0):
    """ComfyUI's ClipVisionModel (CLIP_VISION) of `kind` ("wan": CLIP-ViT-H, "hunyuan": SigLIP), tiny, random init."""
    import json
    import tempfile

    import comfy.clip_vision
    import torch

    from eridiffusion.tiny_models import init_weights

    config = {"num_channels": 3, "image_size": 28, "patch_size": 14, "intermediate_size": 64, "layer_norm_eps": 1e-5}
    config.update(num_attention_heads=2, num_hidden_layers=2, **CLIP_VISION_TINY[kind])
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:  # (0.3.75 reads a file)
        json.dump(config, f)
    clip_vision = comfy.clip_vision.ClipVisionModel(f.name)
    init_weights(clip_vision.model, torch.Generator().manual_seed(seed))
    return clip_vision


def _i2v(build, family):
    return TinyFamily(build, family=family, video_frames=VIDEO_FRAMES, start_image=True)


FAMILIES = {
    "wan21_i2v": _i2v(tiny_wan21_i2v, "Wan 2.1 image-to-video"),
    "wan22_i2v_14b": _i2v(tiny_wan22_i2v, "Wan 2.2 image-to-video 14B"),
    "hunyuan_video15_i2v": _i2v(tiny_hunyuan_video15, "HunyuanVideo 1.5 image-to-video"),
}
