"""The tiny Ideogram 4 stack: ComfyUI's Ideogram4Transformer2DModel as Ideogram4, its Qwen3-VL-8B
13-layer-tap encoder, and the real TAEF2, as FLUX.2's latent space is Ideogram 4's; see tiny_stack."""

import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_stack import LLAMA_TINY, TinyFamily
from devkit.tiny_vaes import taef2_vae
from eridiffusion.tiny_models import diffusion_model, text_encoder

# Ideogram 4 (model_detection "embed_image_indicator.weight"): detection reads only the input width
# (input_proj) and the layer count; every other size is the class's unet_extra_config, which ComfyUI
# lays over whatever detection gives, so it is cut after detection. Tiny: 2 layers of two heads of 32
# (real 18 of 256) with the real MRoPE split (24:20:20 over 64 rotary pairs) scaled to 6:5:5; the
# conditioning width is the tiny encoder's 13 taps. The input width is TAEF2's 32 unpacked channels
# (the real 128 are the FLUX.2 VAE's 2x2-packed ones): the model's own 2x2 "unpacking" regroups
# channels only, so each token is one latent pixel either way, at 8 px here rather than 16.
IDEOGRAM4_WIDTH = 64
IDEOGRAM4_TAPS = 13  # comfy.text_encoders.ideogram4.IDEOGRAM4_TAP_LAYERS
IDEOGRAM4_SIZES = {
    "num_attention_heads": 2,
    "attention_head_dim": IDEOGRAM4_WIDTH // 2,
    "intermediate_size": 128,
    "adaln_dim": 32,
    "llm_features_dim": IDEOGRAM4_TAPS * LLAMA_TINY["hidden_size"],
    "mrope_section": [6, 5, 5],
}
# The taps reach the input of layer 36 (the 36-layer Qwen3-VL-8B's output), so the tiny encoder keeps
# its 36 layers, 32 wide.
QWEN3VL_8B_TAPPED = {**LLAMA_TINY, "num_hidden_layers": 36}


def tiny_ideogram4(seed: int = 0):
    """Ideogram 4: ComfyUI's Ideogram4Transformer2DModel as Ideogram4, its Qwen3-VL-8B 13-layer-tap
    encoder, and the real TAEF2, as FLUX.2's latent space is Ideogram 4's."""
    generator = torch.Generator().manual_seed(seed)
    vae = taef2_vae()
    channels = vae.latent_channels
    layout = {
        "embed_image_indicator.weight": (2, IDEOGRAM4_WIDTH),
        "input_proj.weight": (IDEOGRAM4_WIDTH, channels),
        **blocks("layers", 2),
    }
    config = detected_model_config(layout, None, "Ideogram4")
    config.unet_config.update(IDEOGRAM4_SIZES)
    config.latent_format.latent_channels = channels  # empty latents (sampling) in TAEF2's channels
    model = diffusion_model(config, generator)
    clip = text_encoder(config.clip_target(), generator, {"qwen3vl_8b_model_config": QWEN3VL_8B_TAPPED})
    return model, clip, vae


FAMILIES = {
    "ideogram4": TinyFamily(tiny_ideogram4, family="Ideogram 4", steps=100, needs=("Ideogram4",), since="0.28.0"),
}
