"""The tiny Hunyuan-DiT v1.2 stack: ComfyUI's HunYuanDiT, its Chinese-RoBERTa + mT5-XL encoders and a
4-channel TAESD; see tiny_stack."""

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_stack import T5_TINY, TinyFamily, borrowed_spiece_model, taesd_stack

# Hunyuan-DiT v1.2 (model_detection "mlp_t5.0.weight"): detection reads the width from x_embedder and
# tells v1.2 from v1.0/1.1 (HunyuanDiT1) by its extra embedder's input: 1024 (the pooled mT5 alone,
# ComfyUI's fixed pooler width) rather than 3968 (with the size and style conditions), so that
# width stays real. Tiny: 64 wide in two heads (real 1408 in 16), 4 blocks so that the long skip
# connections of the second half (block > depth / 2) are there; the text widths follow the tiny
# Chinese-RoBERTa (CLIP) and mT5-XL encoders.
HYDIT_WIDTH = 64
HYDIT_LAYOUT = {
    "mlp_t5.0.weight": (1,),
    "x_embedder.proj.weight": (HYDIT_WIDTH, 4, 2, 2),
    "extra_embedder.0.weight": (4 * HYDIT_WIDTH, 1024),
    **blocks("blocks", 4),
}
BERT_TINY = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_hidden_layers": 2}
MT5_TINY = {**T5_TINY, "vocab_size": 32000}  # sized to the borrowed sentencepiece model
HYDIT_SHRINK = {
    "num_heads": 2,
    "text_states_dim": BERT_TINY["hidden_size"],
    "text_states_dim_t5": MT5_TINY["d_model"],
}


def tiny_hunyuan_dit(seed: int = 0):
    """Hunyuan-DiT v1.2: ComfyUI's HunYuanDiT as HunyuanDiT, its Chinese-RoBERTa + mT5-XL encoders
    (each padded to the 77 and 256 tokens the model's text padding expects), and a 4-channel TAESD
    (the real VAE is SDXL's)."""
    config = detected_model_config(HYDIT_LAYOUT, HYDIT_SHRINK, "HunyuanDiT")
    te_options = {"hydit_clip_model_config": BERT_TINY, "mt5xl_model_config": MT5_TINY}
    # mT5's sentencepiece model travels inside the mT5-XL checkpoint ("mt5xl.spiece_model")
    return taesd_stack(config, config.clip_target(), te_options, 4, seed, borrowed_spiece_model("mt5xl.spiece_model"))


FAMILIES = {"hunyuan_dit": TinyFamily(tiny_hunyuan_dit, family="Hunyuan-DiT v1.2", steps=100, needs=("HunyuanDiT",))}
