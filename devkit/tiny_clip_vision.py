"""Tiny random-init image encoders (CLIP_VISION) of the image-to-video models, as CLIPVisionLoader
builds them from a config: CLIP-ViT-H for Wan 2.1 I2V, SigLIP for HunyuanVideo 1.5 I2V. Import once
ComfyUI is on sys.path."""

import json
import tempfile

import comfy.clip_vision
import torch

from eridiffusion.tiny_models import init_weights

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
    config = {"num_channels": 3, "image_size": 28, "patch_size": 14, "intermediate_size": 64, "layer_norm_eps": 1e-5}
    config.update(num_attention_heads=2, num_hidden_layers=2, **CLIP_VISION_TINY[kind])
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:  # (0.3.75 reads a file)
        json.dump(config, f)
    clip_vision = comfy.clip_vision.ClipVisionModel(f.name)
    init_weights(clip_vision.model, torch.Generator().manual_seed(seed))
    return clip_vision
