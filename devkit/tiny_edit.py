"""Tiny stacks of the multi-reference edit models: Qwen-Image-Edit (2509-style) is ComfyUI's
QwenImage with the Qwen2.5-VL encoder whose vision tower reads the reference images
(TextEncodeQwenImageEditPlus); the tiny one keeps ComfyUI's own Qwen2VLVisionTransformer class, cut
to two narrow blocks, so the pictures reach the prompt as they do in the real model."""

import comfy.ops
import comfy.text_encoders.qwen_vl
import torch

from devkit.tiny_dit import LLAMA_TINY, tiny_qwen_image
from devkit.tiny_models import TinyFamily
from eridiffusion.training.model.tiny_models import init_weights

# Qwen2.5-VL's vision tower (real: 1280 wide, 32 blocks of 16 heads) at two blocks of two heads; its
# patching (14 px, 2x2 merge, 112 px windows) and its merger onto the language model's width as real.
VISION_TINY = {"hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "num_layers": 2}


def tiny_qwen_image_edit(seed: int = 0):
    """Qwen-Image-Edit: the tiny Qwen-Image stack whose encoder's vision tower is a tiny random one."""
    model, clip, vae = tiny_qwen_image(seed)
    generator = torch.Generator().manual_seed(seed + 1)
    for parent in list(clip.cond_stage_model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, comfy.text_encoders.qwen_vl.Qwen2VLVisionTransformer):
                tower = comfy.text_encoders.qwen_vl.Qwen2VLVisionTransformer(
                    output_hidden_size=LLAMA_TINY["hidden_size"],
                    dtype=torch.float32,
                    ops=comfy.ops.disable_weight_init,
                    **VISION_TINY,
                )
                init_weights(tower, generator)
                setattr(parent, name, tower)
    return model, clip, vae


FAMILIES = {
    "qwen_image_edit": TinyFamily(
        tiny_qwen_image_edit, family="Qwen-Image-Edit (2509-style, up to 3 references)", steps=100, resolution=128
    ),
}
