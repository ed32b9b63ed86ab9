"""Tiny stacks of the edit and fill models. Qwen-Image-Edit (2509-style) is ComfyUI's QwenImage with
the Qwen2.5-VL encoder whose vision tower reads the reference images (TextEncodeQwenImageEditPlus);
the tiny one keeps ComfyUI's own Qwen2VLVisionTransformer class, cut to two narrow blocks, so the
pictures reach the prompt as they do in the real model. FLUX.1 Fill is the Flux DiT whose input
stacks the noise, the masked image's latent and the mask (96 channels), which the host's detection
reads as FluxInpaint."""

import comfy.ops
import comfy.text_encoders.qwen_vl
import torch

from devkit.detected_configs import detected_model_config
from devkit.tiny_dit import LLAMA_TINY, tiny_qwen_image
from devkit.tiny_flux import FLUX_DEV_LAYOUT, FLUX_SHRINK, FLUX_WIDTH, _flux1
from devkit.tiny_models import TinyFamily
from eridiffusion.tiny_models import init_weights

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


# FLUX.1 Fill as detection reads it: Flux dev's layout whose img_in takes 16 + 16 + 64 channels
# (noise, masked image latent, the mask unshuffled 8x8) in 2x2 patches.
FLUX_FILL_LAYOUT = {**FLUX_DEV_LAYOUT, "img_in.weight": (FLUX_WIDTH, (16 + 16 + 64) * 2 * 2)}


def tiny_flux_fill(seed: int = 0):
    """FLUX.1 Fill [dev]: ComfyUI's FluxInpaint (Flux with guidance embedding and the inpainting input
    channels), clip_l + t5xxl, a 16-channel TAESD."""
    return _flux1(detected_model_config(FLUX_FILL_LAYOUT, FLUX_SHRINK, "FluxInpaint"), seed)


FAMILIES = {
    "qwen_image_edit": TinyFamily(
        tiny_qwen_image_edit, family="Qwen-Image-Edit (2509-style, up to 3 references)", steps=100, resolution=128
    ),
    "flux_fill": TinyFamily(tiny_flux_fill, family="Flux.1 Fill (inpainting)", steps=100, resolution=128, inpaint=True),
}
