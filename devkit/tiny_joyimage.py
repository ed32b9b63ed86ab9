"""The tiny JoyImage stack: ComfyUI's JoyImageTransformer3DModel as JoyImage, its Qwen3-VL-8B encoder
and its real VAE class, the Wan 2.1 VAE, narrowed; see tiny_stack."""

import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_stack import LLAMA_TINY, TinyFamily, qwen3_vl_text_encoder
from devkit.tiny_vaes import tiny_wan21_vae
from eridiffusion.tiny_models import diffusion_model

# JoyImage (model_detection: a 5-D img_in with "double_blocks.0.attn.img_attn_q_norm.weight"):
# detection reads the width and patch from img_in and the head width from the q-norm, and hard-codes
# the Qwen3-VL-8B text width of 4096, cut here to the tiny encoder's. Tiny: 64 wide, two heads of 32
# with the class's rope split (unet_extra_config: 16:56:56 over 128, laid over whatever detection
# gives, so cut after it) scaled to 4:14:14; 2 double blocks.
JOYIMAGE_WIDTH = 64
JOYIMAGE_LAYOUT = {
    "img_in.weight": (JOYIMAGE_WIDTH, 16, 1, 2, 2),
    "double_blocks.0.attn.img_attn_qkv.weight": (1,),
    "double_blocks.0.attn.img_attn_q_norm.weight": (32,),
    "condition_embedder.time_embedder.linear_1.weight": (1,),
    **blocks("double_blocks", 2),
}
JOYIMAGE_SHRINK = {"text_dim": LLAMA_TINY["hidden_size"]}
JOYIMAGE_ROPE = [4, 14, 14]


def tiny_joyimage(seed: int = 0):
    """JoyImage: ComfyUI's JoyImageTransformer3DModel as JoyImage, its Qwen3-VL-8B encoder (vision
    tower zeroed), and its real VAE class, the Wan 2.1 VAE, narrowed."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(JOYIMAGE_LAYOUT, JOYIMAGE_SHRINK, "JoyImage")
    config.unet_config["rope_dim_list"] = JOYIMAGE_ROPE
    model = diffusion_model(config, generator)
    clip = qwen3_vl_text_encoder(config.clip_target(), generator, {"qwen3vl_8b_model_config": LLAMA_TINY})
    return model, clip, tiny_wan21_vae(generator)


FAMILIES = {"joyimage": TinyFamily(tiny_joyimage, family="JoyImage", steps=100, needs=("JoyImage",), since="0.28.0")}
