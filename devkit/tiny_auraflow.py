"""The tiny AuraFlow stack: ComfyUI's AuraFlow MMDiT, the pile-T5-XL encoder and a 4-channel TAESD;
see tiny_stack."""

from devkit.detected_configs import blocks
from devkit.tiny_stack import T5_TINY, TinyFamily, detected_at_full_width, taesd_stack

# AuraFlow (model_detection: "double_layers.0.attn.w1q.weight"): 2 double + 2 single layers (real
# 4 + 32) and max_seq, the real 32x32 patch grid of the learned positional table, as detected.
# ComfyUI's AuraFlow class is the one whose pile-T5 input is 2048 wide, so the layout carries that
# width and the model is built with the tiny pile-T5 width. Detection reads no model width: the
# model's defaults are cut to two heads of 32 (real: 12 of 256).
AURAFLOW_WIDTH = 64
AURAFLOW_LAYOUT = {
    "double_layers.0.attn.w1q.weight": (AURAFLOW_WIDTH, AURAFLOW_WIDTH),
    "positional_encoding": (1, 32 * 32, AURAFLOW_WIDTH),
    "cond_seq_linear.weight": (AURAFLOW_WIDTH, 2048),
    **blocks("double_layers", 2),
    **blocks("single_layers", 2),
}
AURAFLOW_SHRINK = {
    "cond_seq_dim": T5_TINY["d_model"],
    "dim": AURAFLOW_WIDTH,
    "n_heads": 2,
    "global_conddim": AURAFLOW_WIDTH,
}


def tiny_auraflow(seed: int = 0):
    """AuraFlow: ComfyUI's AuraFlow MMDiT, the pile-T5-XL encoder and a 4-channel TAESD (the real VAE
    is SDXL's)."""
    model_config = detected_at_full_width(AURAFLOW_LAYOUT, AURAFLOW_SHRINK, "AuraFlow")
    return taesd_stack(model_config, model_config.clip_target(), {"pile_t5xl_model_config": T5_TINY}, 4, seed)


# 256 pile-T5 tokens per prompt: slower steps
FAMILIES = {"auraflow": TinyFamily(tiny_auraflow, family="AuraFlow", steps=100)}
