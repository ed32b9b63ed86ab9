"""Tiny random-init stacks of image DiTs that got their tested rows in 2026 (Krea 2, JoyImage, Ideogram 4,
new in ComfyUI 0.2x; Cosmos-Predict2 text-to-image and Hunyuan-DiT v1.2, which ComfyUI 0.3.75 has too
and so are tested there as well), built from ComfyUI's own classes; see tiny_models. Each
diffusion-model config is what the host's own model detection reads from a tiny state-dict layout;
text encoders are the class's own clip_target() shrunk through "<name>_model_config" options, with
the real vocabularies. Widths ComfyUI itself hard-codes stay at their real size (said where)."""

import os

import comfy.sd
import comfy.text_encoders.aura_t5
import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_dit import LLAMA_TINY, T5_TINY, wan21_vae
from devkit.tiny_flux import taef2_vae
from devkit.tiny_models import TinyFamily
from eridiffusion.tiny_models import diffusion_model, init_weights, taesd_vae, text_encoder


def vision_free_text_encoder(clip_target, generator, te_options):
    """ComfyUI's Qwen3-VL CLIP for `clip_target` with random language-model weights, and its vision
    towers, which ComfyUI builds at full size whatever the language model's config and which only
    read image prompts (edit models), left as zeros in one shared element each (as
    tiny_dit.qwen_vl_text_encoder does for Qwen2.5-VL's)."""
    import comfy.text_encoders.qwen3vl  # (here: ComfyUI 0.3.75 has no Qwen3-VL)

    tower_class = comfy.text_encoders.qwen3vl.Qwen3VLVisionModel
    clip = comfy.sd.CLIP(target=clip_target, model_options={"dtype": torch.float32, **te_options})
    towers = [
        (parent, name, child)
        for parent in clip.cond_stage_model.modules()
        for name, child in parent.named_children()
        if isinstance(child, tower_class)
    ]
    for parent, name, _ in towers:
        delattr(parent, name)  # out of init_weights' reach
    init_weights(clip.cond_stage_model, generator)
    for parent, name, tower in towers:
        for module in tower.modules():
            for key, p in list(module.named_parameters(recurse=False)):
                zeros = torch.zeros((), dtype=p.dtype).expand(p.shape)
                setattr(module, key, torch.nn.Parameter(zeros, requires_grad=False))
        setattr(parent, name, tower)
    return clip


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
    clip = vision_free_text_encoder(
        config.clip_target(),
        generator,
        {"qwen3vl_4b_model_config": QWEN3VL_4B_TAPPED},
    )
    return model, clip, wan21_vae(generator)


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
    clip = vision_free_text_encoder(
        config.clip_target(),
        generator,
        {"qwen3vl_8b_model_config": LLAMA_TINY},
    )
    return model, clip, wan21_vae(generator)


# Cosmos-Predict2 text-to-image (model_detection's Cosmos-Predict2 branch, no LLM adapter): detection
# reads the width and input channels (16 + the padding mask, at a 2x2 patch) from x_embedder and
# hard-codes the 1024-wide T5-XXL context, cut to the tiny T5's. Tiny: MiniTrainDIT 64 wide (real
# 2048), 2 blocks of two heads, as tiny_recent_image's Anima, its sibling.
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
    return model, clip, wan21_vae(generator)


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
MT5_TINY = {**T5_TINY, "vocab_size": 32000}  # sized to the borrowed sentencepiece model below
HYDIT_SHRINK = {
    "num_heads": 2,
    "text_states_dim": BERT_TINY["hidden_size"],
    "text_states_dim_t5": MT5_TINY["d_model"],
}


def _mt5_tokenizer_data():
    # mT5's sentencepiece model is not shipped with ComfyUI: it travels inside the mT5-XL checkpoint
    # ("mt5xl.spiece_model"). The tiny stack borrows the one ComfyUI does ship (pile-T5's, 32000
    # pieces) and sizes the tiny mT5's vocabulary to it.
    path = os.path.join(os.path.dirname(comfy.text_encoders.aura_t5.__file__), "t5_pile_tokenizer", "tokenizer.model")
    with open(path, "rb") as f:
        return {"mt5xl.spiece_model": f.read()}


def tiny_hunyuan_dit(seed: int = 0):
    """Hunyuan-DiT v1.2: ComfyUI's HunYuanDiT as HunyuanDiT, its Chinese-RoBERTa + mT5-XL encoders
    (each padded to the 77 and 256 tokens the model's text padding expects), and a 4-channel TAESD
    (the real VAE is SDXL's)."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(HYDIT_LAYOUT, HYDIT_SHRINK, "HunyuanDiT")
    model = diffusion_model(config, generator)
    clip = text_encoder(
        config.clip_target(),
        generator,
        {"hydit_clip_model_config": BERT_TINY, "mt5xl_model_config": MT5_TINY},
        _mt5_tokenizer_data(),
    )
    return model, clip, taesd_vae(4, config.latent_format, generator)


# Ideogram 4 (model_detection "embed_image_indicator.weight"): detection reads only the input width
# (input_proj) and the layer count; every other size is the class's unet_extra_config, which ComfyUI
# lays over whatever detection gives, so it is cut after detection. Tiny: 2 layers of two heads of 32
# (real 18 of 256) with the real MRoPE split (24:20:20 over 64 rotary pairs) scaled to 6:5:5; the
# conditioning width is the tiny encoder's 13 taps. The input width is TAEF2's 32 unpacked channels
# (the real 128 are the FLUX.2 VAE's 2x2-packed ones): the model's own 2x2 "unpacking" regroups
# channels only, so each token is one latent pixel either way, at 8 px here rather than 16.
IDEOGRAM4_WIDTH = 64
IDEOGRAM4_TAPS = 13  # comfy.text_encoders.ideogram4.IDEOGRAM4_TAP_LAYERS
IDEOGRAM4_SIZES = {
    "num_attention_heads": 2,
    "attention_head_dim": IDEOGRAM4_WIDTH // 2,
    "intermediate_size": 128,
    "adaln_dim": 32,
    "llm_features_dim": IDEOGRAM4_TAPS * LLAMA_TINY["hidden_size"],
    "mrope_section": [6, 5, 5],
}
# The taps reach the input of layer 36 (the 36-layer Qwen3-VL-8B's output), so the tiny encoder keeps
# its 36 layers, 32 wide.
QWEN3VL_8B_TAPPED = {**LLAMA_TINY, "num_hidden_layers": 36}


def tiny_ideogram4(seed: int = 0):
    """Ideogram 4: ComfyUI's Ideogram4Transformer2DModel as Ideogram4, its Qwen3-VL-8B 13-layer-tap
    encoder, and the real TAEF2, as FLUX.2's latent space is Ideogram 4's."""
    generator = torch.Generator().manual_seed(seed)
    vae = taef2_vae()
    channels = vae.latent_channels
    layout = {
        "embed_image_indicator.weight": (2, IDEOGRAM4_WIDTH),
        "input_proj.weight": (IDEOGRAM4_WIDTH, channels),
        **blocks("layers", 2),
    }
    config = detected_model_config(layout, None, "Ideogram4")
    config.unet_config.update(IDEOGRAM4_SIZES)
    config.latent_format.latent_channels = channels  # empty latents (sampling) in TAEF2's channels
    model = diffusion_model(config, generator)
    clip = text_encoder(config.clip_target(), generator, {"qwen3vl_8b_model_config": QWEN3VL_8B_TAPPED})
    return model, clip, vae


FAMILIES = {
    "krea2": TinyFamily(tiny_krea2, family="Krea 2", steps=100, needs=("Krea2",), since="0.28.0"),
    "joyimage": TinyFamily(tiny_joyimage, family="JoyImage", steps=100, needs=("JoyImage",), since="0.28.0"),
    "cosmos_predict2_t2i": TinyFamily(
        tiny_cosmos_predict2_t2i,
        family="Cosmos-Predict2 text-to-image",
        steps=100,
        needs=("CosmosT2IPredict2",),
    ),
    "hunyuan_dit": TinyFamily(tiny_hunyuan_dit, family="Hunyuan-DiT v1.2", steps=100, needs=("HunyuanDiT",)),
    "ideogram4": TinyFamily(tiny_ideogram4, family="Ideogram 4", steps=100, needs=("Ideogram4",), since="0.28.0"),
}
