"""The tiny Lumina Image 2.0 stack: ComfyUI's NextDiT, the Gemma2-2B encoder (on a borrowed
sentencepiece model) and a 16-channel TAESD; see tiny_stack."""

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_stack import LLAMA_TINY, TinyFamily, borrowed_spiece_model, taesd_stack

# Lumina Image 2.0 (model_detection: "cap_embedder.1.weight" and a noise refiner): detection tells
# Lumina 2 from Z-Image by the cap_embedder width and sets that variant's heads, rope and feed-forward,
# so the layout carries the real 2304 and the rope lengths, theta and feed-forward come from
# detection; 2 layers (counted; real 26); the width is cut to 48 in two heads of 24 with one kv head
# (real: 24 of 96, 8 kv heads) split in three equal rope axes as the real ones; the refiners stay 2
# deep; cap_feat_dim is the tiny Gemma2 width.
LUMINA2_BLOCKS = {"noise_refiner.0.attention.k_norm.weight": (1,), **blocks("layers", 2)}  # only looked for
LUMINA2_LAYOUT = {**LUMINA2_BLOCKS, "cap_embedder.1.weight": (2304, LLAMA_TINY["hidden_size"])}
LUMINA2_SHRINK = {"dim": 48, "n_heads": 2, "n_kv_heads": 1, "axes_dims": [8, 8, 8]}


def tiny_lumina2(seed: int = 0):
    """Lumina Image 2.0: ComfyUI's NextDiT, the Gemma2-2B encoder and a 16-channel TAESD (the real
    VAE is Flux's)."""
    model_config = detected_model_config(LUMINA2_LAYOUT, LUMINA2_SHRINK, "Lumina2")
    te_options = {"gemma2_2b_model_config": LLAMA_TINY}
    return taesd_stack(model_config, model_config.clip_target(), te_options, 16, seed, borrowed_spiece_model())


FAMILIES = {"lumina2": TinyFamily(tiny_lumina2, family="Lumina Image 2.0")}
