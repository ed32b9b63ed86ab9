"""The tiny HunyuanImage 2.1 stack: ComfyUI's HunyuanVideo transformer in its image form, the
Qwen2.5-VL-7B encoder plus the byT5 glyph encoder, and a 64-channel TAESD; see tiny_stack."""

import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_stack import LLAMA_TINY_4_LAYERS, TinyFamily, qwen25_vl_text_encoder
from eridiffusion.tiny_models import diffusion_model, taesd_vae

# HunyuanImage 2.1 (model_detection: "txt_in.individual_token_refiner..." with a 2D patch): the
# HunyuanVideo transformer with 64 latent channels at patch 1x1, no vector_in, the byT5 glyph mapper
# (only its presence is read), 2 double + 2 single blocks (real 20 + 40) and width 64 (real 3584),
# all as detected; context_in_dim is the tiny Qwen2.5-VL width. Detection takes 128-wide heads and
# two rope axes of 64: cut to two heads of 32 with two equal axes of 16.
HUNYUAN_IMAGE21_WIDTH = 64
HUNYUAN_IMAGE21_LAYOUT = {
    "txt_in.individual_token_refiner.blocks.0.norm1.weight": (HUNYUAN_IMAGE21_WIDTH,),
    "txt_in.input_embedder.weight": (HUNYUAN_IMAGE21_WIDTH, LLAMA_TINY_4_LAYERS["hidden_size"]),
    "img_in.proj.weight": (HUNYUAN_IMAGE21_WIDTH, 64, 1, 1),
    "final_layer.linear.weight": (64, HUNYUAN_IMAGE21_WIDTH),
    "byt5_in.fc1.weight": (1,),
    **blocks("double_blocks", 2),
    **blocks("single_blocks", 2),
}
HUNYUAN_IMAGE21_SHRINK = {"num_heads": 2, "axes_dim": [16, 16]}
# The glyph encoder keeps byT5-small's 1472 width: the DiT's byt5_in mapper reads 1472 features
# whatever its config. ComfyUI builds it without a model_name, so SDClipModel looks its overrides
# up under "_model_config".
BYT5_TINY = {"d_kv": 16, "num_heads": 2, "d_ff": 64, "num_layers": 2}


def tiny_hunyuan_image21(seed: int = 0):
    """HunyuanImage 2.1: ComfyUI's HunyuanVideo transformer in its image form, the Qwen2.5-VL-7B
    encoder (reading the third layer from the end, so four layers here) plus the byT5 glyph encoder,
    and a 64-channel TAESD. The real VAE is a 32x-downsampling 64-channel autoencoder whose widths
    ComfyUI fixes (no way to build it small); the TAESD has its channels and scale but downsamples
    8x, so a 96x64 image is a 12x8 latent here instead of 3x2."""
    generator = torch.Generator().manual_seed(seed)
    model_config = detected_model_config(HUNYUAN_IMAGE21_LAYOUT, HUNYUAN_IMAGE21_SHRINK, "HunyuanImage21")
    model = diffusion_model(model_config, generator)
    te_options = {"qwen25_7b_model_config": LLAMA_TINY_4_LAYERS, "_model_config": BYT5_TINY}
    clip = qwen25_vl_text_encoder(model_config.clip_target(), generator, te_options)
    return model, clip, taesd_vae(64, model_config.latent_format, generator)


FAMILIES = {"hunyuan_image21": TinyFamily(tiny_hunyuan_image21, family="HunyuanImage 2.1")}
