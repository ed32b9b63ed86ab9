"""The tiny Qwen-Image stacks: Qwen-Image (ComfyUI's QwenImage DiT, the Qwen2.5-VL-7B encoder, the Wan
2.1 VAE) and Qwen-Image-Edit (2509-style), whose encoder's vision tower reads the reference images
(TextEncodeQwenImageEditPlus): the tiny one keeps ComfyUI's own Qwen2VLVisionTransformer class, cut
to two narrow blocks, so the pictures reach the prompt as they do in the real model; see tiny_stack."""

import comfy.ops
import comfy.text_encoders.qwen_vl
import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_stack import LLAMA_TINY, TinyFamily, qwen25_vl_text_encoder
from devkit.tiny_vaes import tiny_wan21_vae
from eridiffusion.tiny_models import diffusion_model, init_weights

# Qwen-Image (model_detection: "txt_norm.weight"): in_channels 64 (16 latent channels x 2x2 patch)
# and 2 blocks (real 60) as detected; out_channels is the model's default 16. Detection reads no
# width, so the model's full-size defaults are cut to two heads of 32 (real: 24 of 128) with the real
# rope split scaled down (4:14:14 for 16:56:56); joint_attention_dim is the tiny Qwen2.5-VL width.
QWEN_IMAGE_WIDTH = 2 * 32
QWEN_IMAGE_LAYOUT = {
    "txt_norm.weight": (LLAMA_TINY["hidden_size"],),
    "img_in.weight": (QWEN_IMAGE_WIDTH, 16 * 2 * 2),
    **blocks("transformer_blocks", 2),
}
QWEN_IMAGE_SHRINK = {
    "num_attention_heads": 2,
    "attention_head_dim": 32,
    "axes_dims_rope": [4, 14, 14],
    "joint_attention_dim": LLAMA_TINY["hidden_size"],
}


def tiny_qwen_image(seed: int = 0):
    """Qwen-Image: ComfyUI's QwenImage DiT, the Qwen2.5-VL-7B encoder and its real VAE class, the
    Wan 2.1 causal 3D VAE (5D latents, one frame per image), narrowed."""
    generator = torch.Generator().manual_seed(seed)
    model_config = detected_model_config(QWEN_IMAGE_LAYOUT, QWEN_IMAGE_SHRINK, "QwenImage")
    model = diffusion_model(model_config, generator)
    clip = qwen25_vl_text_encoder(model_config.clip_target(), generator, {"qwen25_7b_model_config": LLAMA_TINY})
    return model, clip, tiny_wan21_vae(generator)


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
    "qwen_image": TinyFamily(tiny_qwen_image, family="Qwen-Image"),
    "qwen_image_edit": TinyFamily(
        tiny_qwen_image_edit, family="Qwen-Image-Edit (2509-style, up to 3 references)", steps=100, resolution=128
    ),
}
