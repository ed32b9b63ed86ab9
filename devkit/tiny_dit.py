"""Tiny random-init DiT stacks (HiDream, Lumina2, Z-Image, Qwen-Image, OmniGen2, HunyuanImage 2.1,
AuraFlow, PixArt) built from ComfyUI's own classes; see tiny_models.

Each diffusion model's config is what the installed ComfyUI's model detection reads from a few
state-dict keys of the family at tiny shapes (detected_configs), with the sizes detection hard-codes
for the full-size model cut down; block names (and so LoRA keys) are the real ones. Text encoders
are the family's own comfy.text_encoders classes, shrunk through "<name>_model_config" model
options; vocabularies stay real because ComfyUI's shipped tokenizers feed them."""

import os

import comfy.ldm.wan.vae
import comfy.sd
import comfy.supported_models_base
import comfy.text_encoders.aura_t5
import comfy.text_encoders.hidream
import comfy.text_encoders.qwen_vl
import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_models import TinyFamily
from eridiffusion.tiny_models import (
    CLIP_G,
    CLIP_L,
    diffusion_model,
    init_weights,
    taesd_vae,
    text_encoder,
)

# Llama-style encoders (llama.py configs): head_dim is a class constant of each config (128, Gemma2
# 256), so only the head counts, widths and depths shrink. Three layers: Gemma2 and Qwen3 read the
# penultimate one (layer_idx=-2) and SDClipModel asserts abs(layer_idx) < num_layers.
LLAMA_TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
}
# T5 encoders (t5_config_*.json): real 32128 vocabulary, two narrow blocks.
T5_TINY = {"d_model": 32, "d_kv": 16, "num_heads": 2, "d_ff": 64, "num_layers": 2}


def _build(model_config, clip_target, te_options, latent_channels, seed, tokenizer_data=None):
    generator = torch.Generator().manual_seed(seed)
    model = diffusion_model(model_config, generator)
    clip = text_encoder(clip_target, generator, te_options, tokenizer_data)
    vae = taesd_vae(latent_channels, model_config.latent_format, generator)
    return model, clip, vae


def _detected_at_full_width(layout, shrink, expected_class):
    """detected_model_config for a family whose supported_models class ComfyUI picks by a full-size
    width (Z-Image's 3840, AuraFlow's 2048-wide pile-T5 input): the layout carries that width so the
    host picks the class, which is then built on the detected config with `shrink` laid over it
    (detected_model_config lays its shrink over before the pick, which would then miss the class)."""
    model_config = detected_model_config(layout, None, expected_class)
    return type(model_config)({**model_config.unet_config, **shrink})


# HiDream-I1 (model_detection: "caption_projection.0.linear.weight"): detection looks only for that
# key and hard-codes the full model, of which the tiny one keeps the patching, channels, resolution
# and 4 routed experts (2 active); it cuts 16 double + 32 single MoE blocks of 20 heads of 128 to
# 2 + 2 blocks of 2 heads of 16, the rope axes in proportion (8:4:4 for 64:32:32). llama_layers picks,
# per block, which Llama layer's hidden states it reads; caption_channels are [T5 width, Llama
# width]; text_emb_dim is the clip_l + clip_g pooled width.
HIDREAM_LAYOUT = {"caption_projection.0.linear.weight": (2 * 16, T5_TINY["d_model"])}
HIDREAM_SHRINK = {
    "num_layers": 2,
    "num_single_layers": 2,
    "num_attention_heads": 2,
    "attention_head_dim": 16,
    "axes_dims_rope": [8, 4, 4],
    "llama_layers": [0, 1, 1, 1],
    "caption_channels": [T5_TINY["d_model"], LLAMA_TINY["hidden_size"]],
    "text_emb_dim": CLIP_L["hidden_size"] + CLIP_G["hidden_size"],
}


def tiny_hidream(seed: int = 0):
    """HiDream: ComfyUI's HiDream DiT, its four encoders (clip_l, clip_g, t5xxl, Llama 3.1) and a
    16-channel TAESD (the real VAE is Flux's)."""
    model_config = detected_model_config(HIDREAM_LAYOUT, HIDREAM_SHRINK, "HiDream")
    # supported_models.HiDream has no clip_target; comfy.sd builds this one when given all four files.
    clip_target = comfy.supported_models_base.ClipTarget(
        comfy.text_encoders.hidream.HiDreamTokenizer, comfy.text_encoders.hidream.hidream_clip()
    )
    te_options = {
        "clip_l_model_config": CLIP_L,
        "clip_g_model_config": CLIP_G,
        "t5xxl_model_config": T5_TINY,
        "llama_model_config": LLAMA_TINY,
    }
    return _build(model_config, clip_target, te_options, 16, seed)


# Lumina Image 2.0 (model_detection: "cap_embedder.1.weight" and a noise refiner): detection tells
# Lumina 2 from Z-Image by the cap_embedder width and sets that variant's heads, rope and feed-forward,
# so the layout carries the real 2304 and the rope lengths, theta and feed-forward come from
# detection; 2 layers (counted; real 26); the width is cut to 48 in two heads of 24 with one kv head
# (real: 24 of 96, 8 kv heads) split in three equal rope axes as the real ones; the refiners stay 2
# deep; cap_feat_dim is the tiny Gemma2 width.
_LUMINA2_BLOCKS = {"noise_refiner.0.attention.k_norm.weight": (1,), **blocks("layers", 2)}  # only looked for
LUMINA2_LAYOUT = {**_LUMINA2_BLOCKS, "cap_embedder.1.weight": (2304, LLAMA_TINY["hidden_size"])}
LUMINA2_SHRINK = {"dim": 48, "n_heads": 2, "n_kv_heads": 1, "axes_dims": [8, 8, 8]}


def _gemma_tokenizer_data():
    # Gemma's sentencepiece model is not shipped with ComfyUI: it travels inside the Gemma checkpoint
    # as "spiece_model". The tiny stack borrows the sentencepiece model ComfyUI does ship (pile-T5's,
    # 32000 pieces, all valid ids of Gemma's 256000-entry embedding); only the token ids differ.
    path = os.path.join(os.path.dirname(comfy.text_encoders.aura_t5.__file__), "t5_pile_tokenizer", "tokenizer.model")
    with open(path, "rb") as f:
        return {"spiece_model": f.read()}


def tiny_lumina2(seed: int = 0):
    """Lumina Image 2.0: ComfyUI's NextDiT, the Gemma2-2B encoder and a 16-channel TAESD (the real
    VAE is Flux's)."""
    model_config = detected_model_config(LUMINA2_LAYOUT, LUMINA2_SHRINK, "Lumina2")
    return _build(
        model_config,
        model_config.clip_target(),
        {"gemma2_2b_model_config": LLAMA_TINY},
        16,
        seed,
        _gemma_tokenizer_data(),
    )


# Z-Image (the Lumina 2 layout at width 3840, by which detection and the ZImage class know it):
# z_image_modulation, time_scale 1000, the real rope axes, lengths and theta 256 as detected. The
# width is then cut to 256, no lower: the timestep embedding is 256 wide and the modulation layers
# read min(dim, 256) of it. Two heads of the real 128 (real: 30); the feed-forward is cut to 512
# (ffn_dim_multiplier 0.5 instead of 8/3) to keep the run short. No cap_pad_token key, so no
# caption padding tokens.
Z_IMAGE_LAYOUT = {**_LUMINA2_BLOCKS, "cap_embedder.1.weight": (3840, LLAMA_TINY["hidden_size"])}
Z_IMAGE_SHRINK = {"dim": 256, "n_heads": 2, "n_kv_heads": 2, "ffn_dim_multiplier": 0.5}


def tiny_z_image(seed: int = 0):
    """Z-Image: ComfyUI's NextDiT with Z-Image modulation, the Qwen3-4B encoder and a 16-channel
    TAESD (the real VAE is Flux's)."""
    model_config = _detected_at_full_width(Z_IMAGE_LAYOUT, Z_IMAGE_SHRINK, "ZImage")
    return _build(model_config, model_config.clip_target(), {"qwen3_4b_model_config": LLAMA_TINY}, 16, seed)


def wan21_vae(generator, dim=8):
    """ComfyUI's Wan 2.1 VAE (causal 3D, 16 channels, 8x spatial), `dim` base channels instead of 96,
    random init: comfy.sd.VAE reads the width from the state dict."""
    vae = comfy.ldm.wan.vae.WanVAE(
        dim=dim,
        z_dim=16,
        dim_mult=[1, 2, 4, 4],
        num_res_blocks=2,
        attn_scales=[],
        temperal_downsample=[False, True, True],
        dropout=0.0,
    )
    init_weights(vae, generator)
    with torch.no_grad():
        for module in vae.modules():
            if isinstance(module, comfy.ldm.wan.vae.RMS_norm):
                module.gamma.fill_(1.0)  # a norm's scale, not a matrix, whatever its shape
    return comfy.sd.VAE(sd=vae.state_dict())


def qwen_vl_text_encoder(clip_target, generator, te_options):
    """text_encoder() for the Qwen2.5-VL encoders, whose vision tower ComfyUI builds at its full size
    (1280 wide, 32 blocks: 658 M parameters) whatever the language model's config. The tower only
    reads image prompts (edit models), so it is left as zeros in a single shared element instead of
    2.6 GB of random float32 (on a GPU, loading the CLIP would expand them); the language model is
    random as usual."""
    clip = comfy.sd.CLIP(target=clip_target, model_options={"dtype": torch.float32, **te_options})
    towers = [
        (parent, name)
        for parent in clip.cond_stage_model.modules()
        for name, child in parent.named_children()
        if isinstance(child, comfy.text_encoders.qwen_vl.Qwen2VLVisionTransformer)
    ]
    detached = [(parent, name, getattr(parent, name)) for parent, name in towers]
    for parent, name in towers:
        delattr(parent, name)  # out of init_weights' reach
    init_weights(clip.cond_stage_model, generator)
    for parent, name, tower in detached:
        for module in tower.modules():
            for key, p in list(module.named_parameters(recurse=False)):
                setattr(
                    module, key, torch.nn.Parameter(torch.zeros((), dtype=p.dtype).expand(p.shape), requires_grad=False)
                )
        setattr(parent, name, tower)
    return clip


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
    clip = qwen_vl_text_encoder(model_config.clip_target(), generator, {"qwen25_7b_model_config": LLAMA_TINY})
    return model, clip, wan21_vae(generator)


# OmniGen2 (model_detection: "time_caption_embed.timestep_embedder.linear_1.bias"): detection looks
# only for that key and hard-codes the full model, of which the tiny one keeps the patching,
# channels, rope lengths, feed-forward rounding and the 2 refiner layers; it cuts 32 layers of
# 2520 (21 heads of 120, 7 kv heads) to 2 of 48 (two heads of 24, one kv head) in three equal rope
# axes as the real ones; text_feat_dim is the tiny Qwen2.5-3B width.
OMNIGEN2_LAYOUT = {"time_caption_embed.timestep_embedder.linear_1.bias": (48,)}
OMNIGEN2_SHRINK = {
    "num_layers": 2,
    "hidden_size": 48,
    "num_attention_heads": 2,
    "num_kv_heads": 1,
    "axes_dim_rope": [8, 8, 8],
    "text_feat_dim": LLAMA_TINY["hidden_size"],
}


def tiny_omnigen2(seed: int = 0):
    """OmniGen2: ComfyUI's OmniGen2 transformer, the Qwen2.5-VL-3B language model and a 16-channel
    TAESD (the real VAE is Flux's)."""
    model_config = detected_model_config(OMNIGEN2_LAYOUT, OMNIGEN2_SHRINK, "Omnigen2")
    return _build(model_config, model_config.clip_target(), {"qwen25_3b_model_config": LLAMA_TINY}, 16, seed)


# HunyuanImage 2.1 (model_detection: "txt_in.individual_token_refiner..." with a 2D patch): the
# HunyuanVideo transformer with 64 latent channels at patch 1x1, no vector_in, the byT5 glyph mapper
# (only its presence is read), 2 double + 2 single blocks (real 20 + 40) and width 64 (real 3584),
# all as detected; context_in_dim is the tiny Qwen2.5-VL width. Detection takes 128-wide heads and
# two rope axes of 64: cut to two heads of 32 with two equal axes of 16.
HUNYUAN_IMAGE21_WIDTH = 64
HUNYUAN_IMAGE21_LAYOUT = {
    "txt_in.individual_token_refiner.blocks.0.norm1.weight": (HUNYUAN_IMAGE21_WIDTH,),
    "txt_in.input_embedder.weight": (HUNYUAN_IMAGE21_WIDTH, LLAMA_TINY["hidden_size"]),
    "img_in.proj.weight": (HUNYUAN_IMAGE21_WIDTH, 64, 1, 1),
    "final_layer.linear.weight": (64, HUNYUAN_IMAGE21_WIDTH),
    "byt5_in.fc1.weight": (1,),
    **blocks("double_blocks", 2),
    **blocks("single_blocks", 2),
}
HUNYUAN_IMAGE21_SHRINK = {"num_heads": 2, "axes_dim": [16, 16]}
# The glyph encoder keeps byT5-small's 1472 width: the DiT's byt5_in mapper reads 1472 features
# whatever its config. ComfyUI builds it without a model_name, so SDClipModel looks its overrides
# up under "_model_config".
BYT5_TINY = {"d_kv": 16, "num_heads": 2, "d_ff": 64, "num_layers": 2}


def tiny_hunyuan_image21(seed: int = 0):
    """HunyuanImage 2.1: ComfyUI's HunyuanVideo transformer in its image form, the Qwen2.5-VL-7B
    encoder (reading the third layer from the end, so four layers here) plus the byT5 glyph encoder,
    and a 64-channel TAESD. The real VAE is a 32x-downsampling 64-channel autoencoder whose widths
    ComfyUI fixes (no way to build it small); the TAESD has its channels and scale but downsamples
    8x, so a 96x64 image is a 12x8 latent here instead of 3x2."""
    generator = torch.Generator().manual_seed(seed)
    model_config = detected_model_config(HUNYUAN_IMAGE21_LAYOUT, HUNYUAN_IMAGE21_SHRINK, "HunyuanImage21")
    model = diffusion_model(model_config, generator)
    te_options = {"qwen25_7b_model_config": {**LLAMA_TINY, "num_hidden_layers": 4}, "_model_config": BYT5_TINY}
    clip = qwen_vl_text_encoder(model_config.clip_target(), generator, te_options)
    return model, clip, taesd_vae(64, model_config.latent_format, generator)


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
    model_config = _detected_at_full_width(AURAFLOW_LAYOUT, AURAFLOW_SHRINK, "AuraFlow")
    return _build(model_config, model_config.clip_target(), {"pile_t5xl_model_config": T5_TINY}, 4, seed)


# PixArt (model_detection: "t_block.1.weight"): as detected, 2 blocks (real 28), the 512px layout
# (input_size 64, pe_interpolation 1) from a checkpoint's 32x32-patch pos_embed (the model computes
# its own table), the real caption lengths from y_embedding, 120 tokens for alpha and 300 for sigma,
# and alpha's size and aspect micro-conditions from ar_embedder. Detection hard-codes the width:
# cut to 48 (real 1152; a multiple of 3 because the micro-conditions are three hidden/3 embeddings)
# in two heads (real 16); caption_channels (not read) is the tiny T5 width.
PIXART_WIDTH = 48
_PIXART_LAYOUT = {
    "t_block.1.weight": (6 * PIXART_WIDTH, PIXART_WIDTH),
    "pos_embed": (1, 32 * 32, PIXART_WIDTH),
    **blocks("blocks", 2),
}
PIXART_ALPHA_LAYOUT = {
    **_PIXART_LAYOUT,
    "y_embedder.y_embedding": (120, T5_TINY["d_model"]),
    "ar_embedder.mlp.0.weight": (PIXART_WIDTH // 3, 256),
}
PIXART_SIGMA_LAYOUT = {**_PIXART_LAYOUT, "y_embedder.y_embedding": (300, T5_TINY["d_model"])}
PIXART_SHRINK = {"hidden_size": PIXART_WIDTH, "num_heads": 2, "caption_channels": T5_TINY["d_model"]}
# ComfyUI's PixArtMS builds its sin-cos position table with base_size = round(mean latent side / 64)
# * 64 // patch_size, which is 0 (ZeroDivisionError) for images under ~264 px a side on average,
# whatever the config: the tiny PixArts train at 320 px and render 288x256 test samples.
PIXART_SAMPLE_SIZE = (288, 256)


def tiny_pixart_alpha(seed: int = 0):
    """PixArt-alpha: ComfyUI's PixArtMS (with size and aspect micro-conditions), the T5-XXL encoder
    and a 4-channel TAESD (the real VAE is SD1.5's)."""
    model_config = detected_model_config(PIXART_ALPHA_LAYOUT, PIXART_SHRINK, "PixArtAlpha")
    return _build(model_config, model_config.clip_target(), {"t5xxl_model_config": T5_TINY}, 4, seed)


def tiny_pixart_sigma(seed: int = 0):
    """PixArt-sigma: ComfyUI's PixArtMS, the T5-XXL encoder and a 4-channel TAESD (the real VAE is
    SDXL's)."""
    model_config = detected_model_config(PIXART_SIGMA_LAYOUT, PIXART_SHRINK, "PixArtSigma")
    return _build(model_config, model_config.clip_target(), {"t5xxl_model_config": T5_TINY}, 4, seed)


FAMILIES = {
    "hidream": TinyFamily(tiny_hidream, family="HiDream-I1"),
    "lumina2": TinyFamily(tiny_lumina2, family="Lumina Image 2.0"),
    "z_image": TinyFamily(tiny_z_image, family="Z-Image"),
    "qwen_image": TinyFamily(tiny_qwen_image, family="Qwen-Image"),
    "omnigen2": TinyFamily(tiny_omnigen2, family="OmniGen2"),
    "hunyuan_image21": TinyFamily(tiny_hunyuan_image21, family="HunyuanImage 2.1"),
    "auraflow": TinyFamily(tiny_auraflow, family="AuraFlow", steps=100),  # 256 pile-T5 tokens per prompt: slower steps
    "pixart_alpha": TinyFamily(
        tiny_pixart_alpha, family="PixArt-α / Σ", resolution=320, sample_size=PIXART_SAMPLE_SIZE
    ),
    "pixart_sigma": TinyFamily(
        tiny_pixart_sigma, family="PixArt-α / Σ", resolution=320, sample_size=PIXART_SAMPLE_SIZE
    ),
}
