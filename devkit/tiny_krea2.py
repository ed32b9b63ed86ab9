"""The tiny Krea 2 stack: ComfyUI's SingleStreamDiT as Krea2, its Qwen3-VL-4B 12-layer-tap encoder and
its real VAE class, the Wan 2.1 (Qwen-Image) VAE, narrowed; see tiny_stack."""

import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_stack import LLAMA_TINY, TinyFamily, qwen3_vl_text_encoder
from devkit.tiny_vaes import tiny_wan21_vae
from eridiffusion.tiny_models import diffusion_model

# Krea 2 (model_detection "txtfusion.projector.weight"): detection reads the width from first.weight,
# the heads and key/value heads from the attention rows over its fixed head width of 128, the number
# of tapped text layers from the projector and the text width from the fusion blocks' norm. Tiny: 64
# wide, two heads of 32 (so the head width is cut by the width alone) sharing one key/value head, as
# the real 48 share 12; 2 blocks. The text fusion reads the real 12 taps of the Qwen3-VL-4B encoder
# (layers 2, 5, ..., 35), so that encoder keeps its 36 layers, 32 wide.
KREA2_WIDTH = 64
KREA2_LAYOUT = {
    "first.weight": (KREA2_WIDTH, 16 * 2 * 2),
    "blocks.0.attn.wq.weight": (2 * 128, 1),
    "blocks.0.attn.wk.weight": (1 * 128, 1),
    **blocks("blocks", 2),
    "txtfusion.projector.weight": (1, 12),
    "txtfusion.layerwise_blocks.0.prenorm.scale": (LLAMA_TINY["hidden_size"],),
}
KREA2_SHRINK = {"txtheads": 2, "txtkvheads": 2}  # real 20 of 128 over Qwen3-VL-4B's 2560
QWEN3VL_4B_TAPPED = {**LLAMA_TINY, "num_hidden_layers": 36}


def tiny_krea2(seed: int = 0):
    """Krea 2: ComfyUI's SingleStreamDiT as Krea2, its Qwen3-VL-4B 12-layer-tap encoder (vision
    tower zeroed), and its real VAE class, the Wan 2.1 (Qwen-Image) VAE, narrowed."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(KREA2_LAYOUT, KREA2_SHRINK, "Krea2")
    model = diffusion_model(config, generator)
    # Frozen from the start, as ComfyUI leaves every weight it has patched and restored (set_attr_param):
    # torch's matmul folds the projector's transposed (layers-last) input differently when the weight
    # requires grad, so the same weights would give outputs 1e-7 apart before and after a LoRA load.
    model.model.requires_grad_(False)
    clip = qwen3_vl_text_encoder(config.clip_target(), generator, {"qwen3vl_4b_model_config": QWEN3VL_4B_TAPPED})
    return model, clip, tiny_wan21_vae(generator)


FAMILIES = {"krea2": TinyFamily(tiny_krea2, family="Krea 2", steps=100, needs=("Krea2",), since="0.28.0")}
