"""The tiny random-init stack of HiDream-O1-Image (ComfyUI 0.28's HiDreamO1), built from ComfyUI's own
classes; see tiny_stack.

HiDream-O1 is a pixel-space DiT whose backbone is Qwen3-VL-8B's decoder: the prompt's tokens and the
image's 32x32 pixel patches run through the same decoder layers (the text prefix causal, the image
tokens attending to all), so its "text encoder" is a tokenizer alone that hands the model the
prompt's token ids. Model detection reads only that the t_embedder1 and x_embedder keys exist and
builds every size from HiDreamO1Transformer's defaults; the tiny lays its sizes over them through the
transformer's own text_config_overrides / vision_config_overrides arguments."""

import comfy.text_encoders.llama
import torch

from devkit.detected_configs import detected_model_config
from devkit.tiny_stack import TinyFamily
from devkit.tiny_vaes import pixel_space_vae
from eridiffusion.tiny_models import diffusion_model, text_encoder

HIDREAM_O1_LAYOUT = {"t_embedder1.mlp.0.weight": (1,), "x_embedder.proj1.weight": (1,)}
# The decoder: 2 layers, 64 wide, two query heads of 32 sharing one key/value head (grouped, as the
# real 32 over 8); the interleaved MRoPE's axes scaled alike (real 24/20/20 over 64 rotary pairs). The
# vocabulary stays real: the tokenizer's chat-template and <|tms|> ids (up to 151673) index it. The
# patch (32 pixels, 3072 values per token) is a module constant and stays real.
HIDREAM_O1_TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "rope_dims": [6, 5, 5],
}
# The Qwen3-VL vision tower only encodes edit references (none when training from captions): one
# narrow block, no deepstack taps.
HIDREAM_O1_VISION = {"hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "depth": 1}
HIDREAM_O1_SHRINK = {"text_config_overrides": HIDREAM_O1_TEXT, "vision_config_overrides": HIDREAM_O1_VISION}


def unit_llama_norms(module):
    """Set the Qwen3 RMSNorm scales under `module` to 1, as trained checkpoints hold them near
    (init_weights draws 1-D parameters around 0, which would silence the decoder's output)."""
    with torch.no_grad():
        for norm in module.modules():
            if isinstance(norm, comfy.text_encoders.llama.RMSNorm):
                norm.weight.fill_(0.0 if norm.add else 1.0)


def tiny_hidream_o1(seed: int = 0):
    """HiDream-O1: ComfyUI's HiDreamO1Transformer (Qwen3-VL decoder over text and pixel patches), its
    tokenizer-only text encoder (the real Qwen tokenizer and chat template), and ComfyUI's
    pixel-space VAE, what its checkpoint loader gives it."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(HIDREAM_O1_LAYOUT, HIDREAM_O1_SHRINK, "HiDreamO1")
    model = diffusion_model(config, generator)
    unit_llama_norms(model.model.diffusion_model)
    clip = text_encoder(config.clip_target(), generator, {})
    return model, clip, pixel_space_vae()


FAMILIES = {
    "hidream_o1": TinyFamily(
        tiny_hidream_o1, family="HiDream-O1-Image", steps=100, needs=("HiDreamO1",), since="0.28.0"
    ),
}
