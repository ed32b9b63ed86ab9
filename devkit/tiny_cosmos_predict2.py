"""The tiny stacks on ComfyUI's Cosmos-Predict2 MiniTrainDIT: Cosmos-Predict2 text-to-image (its T5-XXL
encoder) and Anima (the DiT with an LLM adapter over a Qwen3-0.6B encoder), each with its real VAE
class, the Wan 2.1 VAE, narrowed; see tiny_stack."""

import torch

from devkit.detected_configs import detected_model_config
from devkit.tiny_stack import LLAMA_TINY, T5_TINY, TinyFamily
from devkit.tiny_vaes import tiny_wan21_vae
from eridiffusion.tiny_models import diffusion_model, init_weights, text_encoder

# Cosmos-Predict2 text-to-image (model_detection's Cosmos-Predict2 branch, no LLM adapter): detection
# reads the width and input channels (16 + the padding mask, at a 2x2 patch) from x_embedder and
# hard-codes the 1024-wide T5-XXL context, cut to the tiny T5's. Tiny: MiniTrainDIT 64 wide (real
# 2048), 2 blocks of two heads, as Anima below.
COSMOS_PREDICT2_LAYOUT = {
    "blocks.0.mlp.layer1.weight": (1,),
    "x_embedder.proj.1.weight": (64, (16 + 1) * 2 * 2),
}
COSMOS_PREDICT2_SHRINK = {
    "num_blocks": 2,
    "num_heads": 2,
    "adaln_lora_dim": 32,
    "crossattn_emb_channels": T5_TINY["d_model"],
}


def tiny_cosmos_predict2_t2i(seed: int = 0):
    """Cosmos-Predict2 text-to-image: ComfyUI's MiniTrainDIT as CosmosT2IPredict2, its T5-XXL
    encoder (real vocabulary, padded to 512 tokens as ComfyUI's tokenizer does), and its real VAE
    class, the Wan 2.1 VAE, narrowed."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(COSMOS_PREDICT2_LAYOUT, COSMOS_PREDICT2_SHRINK, "CosmosT2IPredict2")
    model = diffusion_model(config, generator)
    clip = text_encoder(config.clip_target(), generator, {"t5xxl_model_config": T5_TINY})
    return model, clip, tiny_wan21_vae(generator)


# Anima (model_detection's Cosmos-Predict2 branch with an LLM adapter): MiniTrainDIT 64 wide
# (real 2048), 2 blocks of two heads, reading a 64-wide cross-attention context. ComfyUI builds the
# LLM adapter at its fixed size whatever the config (6 layers 1024 wide, a 32128 x 1024 embedding: 100M
# weights, ~1.2 s a CPU step), so the stack replaces it with the same class at the tiny sizes
# (ANIMA_ADAPTER: one layer, 64 wide, reading 64-wide Qwen3-0.6B states: its encoder keeps 3 layers).
ANIMA_WIDTH = 64
ANIMA_LAYOUT = {
    "blocks.0.mlp.layer1.weight": (1,),
    "llm_adapter.blocks.0.cross_attn.q_proj.weight": (1,),
    "x_embedder.proj.1.weight": (ANIMA_WIDTH, (16 + 1) * 2 * 2),
}  # 16 channels + padding mask
ANIMA_SHRINK = {"num_blocks": 2, "num_heads": 2, "adaln_lora_dim": 32, "crossattn_emb_channels": ANIMA_WIDTH}
ANIMA_ADAPTER = {"source_dim": 64, "target_dim": ANIMA_WIDTH, "model_dim": 64, "num_layers": 1, "num_heads": 2}


def tiny_anima(seed: int = 0):
    """Anima: ComfyUI's Anima DiT (MiniTrainDIT + LLM adapter, at ANIMA_ADAPTER's sizes), its Qwen3-0.6B
    encoder with the T5 token ids the adapter reads, and its real VAE class, the Wan 2.1 (Qwen-Image)
    VAE, narrowed."""
    import comfy.ldm.anima.model
    import comfy.ops

    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(ANIMA_LAYOUT, ANIMA_SHRINK, "Anima")
    model = diffusion_model(config, generator)
    dit = model.model.diffusion_model
    operations = comfy.ops.pick_operations(model.model.get_dtype(), model.model.manual_cast_dtype)
    dit.llm_adapter = comfy.ldm.anima.model.LLMAdapter(**ANIMA_ADAPTER, operations=operations)
    init_weights(dit.llm_adapter, generator)
    qwen3 = {**LLAMA_TINY, "hidden_size": ANIMA_ADAPTER["source_dim"]}
    clip = text_encoder(config.clip_target(), generator, {"qwen3_06b_model_config": qwen3})
    return model, clip, tiny_wan21_vae(generator)


FAMILIES = {
    "cosmos_predict2_t2i": TinyFamily(
        tiny_cosmos_predict2_t2i,
        family="Cosmos-Predict2 text-to-image",
        steps=100,
        needs=("CosmosT2IPredict2",),
    ),
    "anima": TinyFamily(tiny_anima, family="Anima", steps=100, needs=("Anima",), since="0.28.0"),
}
