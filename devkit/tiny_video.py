"""Tiny random-init video stacks (Wan 2.1/2.2, VACE, LTX-Video, HunyuanVideo 1.0/1.5) built from
ComfyUI's own classes, with tiny video VAEs; see tiny_models.

Each diffusion model's config is what the installed ComfyUI's model detection reads from a few
state-dict keys of the family at tiny shapes (detected_configs), with the sizes detection hard-codes
for the full-size model cut down, so block names (and LoRA keys) are the real ones. Text encoders
are the family's own comfy.text_encoders classes shrunk through "<name>_model_config" model options. Each VAE is the
family's own ComfyUI VAE class at small widths, wrapped by comfy.sd.VAE with the real latent layout
(channels, spatial and temporal compression)."""

import json
import logging
import os

import comfy.ldm.hunyuan_video.vae_refiner
import comfy.ldm.lightricks.vae.causal_video_autoencoder as ltx_vae
import comfy.ldm.wan.vae2_2
import comfy.model_management as mm
import comfy.model_patcher
import comfy.ops
import comfy.sd
import comfy.text_encoders.aura_t5
import comfy.text_encoders.qwen_vl
import torch
from comfy.ldm.models.autoencoder import AutoencoderKL, AutoencodingEngine

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_models import TinyFamily
from devkit.tiny_video_vae import tiny_wan_vae
from eridiffusion.tiny_models import CLIP_L, diffusion_model, init_weights, text_encoder

VIDEO_FRAMES = 9  # 4k+1 and 8k+1: one clip length every family's VAE accepts

# T5-style encoders (umt5 for Wan, t5xxl for LTXV): two narrow blocks.
T5_TINY = {"d_model": 32, "d_kv": 16, "num_heads": 2, "d_ff": 64, "num_layers": 2}
# Llama-style encoders read hidden layer -3 (SDClipModel asserts |layer_idx| < layers), so four
# layers; head_dim is a class constant of each llama.py config (128), so only counts and widths shrink.
LLAMA_TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
}


def _gammas_to_one(model):
    """RMS_norm scales as built (ones), so activations keep their scale through a random VAE."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("gamma"):
                p.fill_(1.0)


def _vae_of_layout(layout_keys, model):
    """comfy.sd.VAE running `model` (a ComfyUI VAE class at small widths) with everything else
    comfy.sd.VAE sets for the full-size VAE it recognises by `layout_keys` ({key: full-size shape}):
    latent channels, spatial and temporal ratios, frame-count formulas, pixel scaling. comfy.sd.VAE
    fixes these VAEs' widths, so the full-size one is built on the meta device (no memory, no
    weights) and replaced by `model`."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # "Missing VAE keys": the meta placeholder has only the layout keys
    try:
        with torch.device("meta"):
            vae = comfy.sd.VAE(sd={k: torch.empty(shape) for k, shape in layout_keys.items()}, dtype=torch.float32)
    finally:
        logging.disable(previous)
    vae.first_stage_model = model.to(torch.float32).eval()
    vae.patcher = comfy.model_patcher.ModelPatcher(
        model, load_device=vae.device, offload_device=mm.vae_offload_device()
    )
    vae.size = None
    vae.model_size()
    return vae


# comfy.sd.VAE recognises the Wan 2.2 VAE by a middle-block RMS_norm plus a residual conv in the
# first up block (dim 160, decoder 256 wide, 48 channels, 16x spatial by a 2x2 patchify, 4x temporal).
WAN22_VAE_LAYOUT = {
    "decoder.middle.0.residual.0.gamma": (1024, 1, 1, 1),
    "decoder.upsamples.0.upsamples.0.residual.2.weight": (1024, 1024, 3, 3, 3),
}


def tiny_wan22_vae(generator):
    """ComfyUI's Wan 2.2 VAE (48 channels, 16x spatial, 4x temporal) at width 8 (real: 160/256)."""
    model = comfy.ldm.wan.vae2_2.WanVAE(
        dim=8,
        dec_dim=8,
        z_dim=48,
        dim_mult=[1, 2, 4, 4],
        num_res_blocks=2,
        attn_scales=[],
        temperal_downsample=[False, True, True],
        dropout=0.0,
    )
    init_weights(model, generator)
    _gammas_to_one(model)
    return _vae_of_layout(WAN22_VAE_LAYOUT, model)


# HunyuanVideo 1.0's VAE is an AutoencoderKL with 3D convs (16 channels, 8x spatial, 4x temporal);
# comfy.sd.VAE recognises it by a 3D decoder conv_in that is not 32 channels wide, at ch 128.
HUNYUAN_VIDEO_VAE_LAYOUT = {
    "decoder.conv_in.conv.weight": (512, 16, 3, 3, 3),
    "post_quant_conv.weight": (16, 16, 1, 1, 1),
}
HUNYUAN_VIDEO_VAE = {
    "double_z": True,
    "z_channels": 16,
    "resolution": 256,
    "in_channels": 3,
    "out_ch": 3,
    "ch": 32,
    "ch_mult": [1, 1, 1, 1],
    "num_res_blocks": 1,
    "attn_resolutions": [],
    "dropout": 0.0,
    "conv3d": True,
    "time_compress": 4,
}


def tiny_hunyuan_video_vae(generator):
    """ComfyUI's HunyuanVideo 1.0 VAE (16 channels, 8x spatial, 4x temporal) at ch 8 (real: 128)."""
    model = AutoencoderKL(ddconfig=HUNYUAN_VIDEO_VAE, embed_dim=16)
    init_weights(model, generator)
    return _vae_of_layout(HUNYUAN_VIDEO_VAE_LAYOUT, model)


# HunyuanVideo 1.5's VAE (32 channels, 16x spatial, 4x temporal), recognised by a 32-channel 3D
# decoder conv_in. Its widths must stay multiples of 8 through the pixel-shuffle resamplers, and the
# last one a multiple of 2 x 32 (the encoder's output skip averages groups of channels).
HUNYUAN_VIDEO15_VAE_LAYOUT = {"decoder.conv_in.conv.weight": (1024, 32, 3, 3, 3)}
HUNYUAN_VIDEO15_VAE = {
    "block_out_channels": [8, 16, 32, 64, 64],
    "in_channels": 3,
    "out_channels": 3,
    "num_res_blocks": 1,
    "ffactor_spatial": 16,
    "ffactor_temporal": 4,
    "downsample_match_channel": True,
    "upsample_match_channel": True,
    "z_channels": 32,
}


def tiny_hunyuan_video15_vae(generator):
    """ComfyUI's HunyuanVideo 1.5 VAE at widths 8..64 (real: 128..1024)."""
    target = "comfy.ldm.hunyuan_video.vae_refiner."
    model = AutoencodingEngine(
        regularizer_config={"target": "comfy.ldm.models.autoencoder.EmptyRegularizer"},
        encoder_config={"target": target + "Encoder", "params": HUNYUAN_VIDEO15_VAE},
        decoder_config={"target": target + "Decoder", "params": HUNYUAN_VIDEO15_VAE},
    )
    init_weights(model, generator)
    _gammas_to_one(model)
    return _vae_of_layout(HUNYUAN_VIDEO15_VAE_LAYOUT, model)


# LTX-Video's VAE takes its block list from the checkpoint's metadata, so comfy.sd.VAE builds the tiny
# one itself: 4x4 patchify then three compress_all (2x in time and space each) = 32x spatial, 8x
# temporal; the width (128) and the 128 latent channels are fixed by the class.
LTXV_VAE = {
    "_class_name": "CausalVideoAutoencoder",
    "dims": 3,
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 128,
    "blocks": [["compress_all", 1], ["compress_all", 1], ["compress_all", 1], ["res_x", 1]],
    "scaling_factor": 1.0,
    "norm_layer": "pixel_norm",
    "patch_size": 4,
    "latent_log_var": "uniform",
    "use_quant_conv": False,
    "causal_decoder": False,
}


def tiny_ltxv_vae(generator):
    """ComfyUI's LTX-Video VAE (128 channels, 32x spatial, 8x temporal), one block per level."""
    model = ltx_vae.VideoVAE(config=LTXV_VAE)
    init_weights(model, generator)
    stats = model.per_channel_statistics  # built empty; a checkpoint carries them
    stats.get_buffer("mean-of-means").zero_()
    stats.get_buffer("std-of-means").fill_(1.0)
    return comfy.sd.VAE(sd=model.state_dict(), metadata={"config": json.dumps({"vae": LTXV_VAE})}, dtype=torch.float32)


def _umt5_tokenizer_data():
    # umt5's sentencepiece model is not shipped with ComfyUI: it travels inside the umt5 checkpoint as
    # "spiece_model". The tiny stack borrows the one ComfyUI does ship (pile-T5's, 32000 pieces) and
    # sizes the tiny umt5's vocabulary to it.
    path = os.path.join(os.path.dirname(comfy.text_encoders.aura_t5.__file__), "t5_pile_tokenizer", "tokenizer.model")
    with open(path, "rb") as f:
        return {"spiece_model": f.read()}


UMT5_TINY = {**T5_TINY, "vocab_size": 32000}

# Wan 2.1 (model_detection: "head.modulation"): as detected, 2 blocks of width 32 with a 64-wide
# feed-forward (real 1.3B: 30 of 1536 and 8960), latent channels in (patch_embedding) and out
# (head); detection takes 128-wide heads, cut to two of 16 (real: 12 of 128). text_dim is the umt5
# width (real 4096, not read).
WAN_WIDTH = 32


def _wan_layout(latent_channels, width=WAN_WIDTH):
    """The Wan keys detection reads, for a model `width` wide on `latent_channels` latent channels."""
    return {
        "head.modulation": (1, 2, width),
        "head.head.weight": (latent_channels * 2 * 2, width),
        "patch_embedding.weight": (width, latent_channels, 1, 2, 2),
        "blocks.0.ffn.0.weight": (2 * width, width),
        **blocks("blocks", 2),
    }


WAN21_LAYOUT = _wan_layout(16)
WAN_SHRINK = {"num_heads": 2, "text_dim": UMT5_TINY["d_model"]}
# VACE adds control blocks (one here) fed by 96 channels: 2 x 16 latent channels of control video
# plus the 64-channel mask, as model_base.WAN21_Vace builds them.
WAN21_VACE_LAYOUT = {
    **WAN21_LAYOUT,
    "vace_patch_embedding.weight": (WAN_WIDTH, 96, 1, 2, 2),
    **blocks("vace_blocks", 1),
}
# Wan 2.2 TI2V-5B: 48 latent channels in and out (Wan 2.2 VAE), by which ComfyUI knows it.
WAN22_LAYOUT = _wan_layout(48)


def _wan_stack(model_config, vae_builder, seed):
    generator = torch.Generator().manual_seed(seed)
    model = diffusion_model(model_config, generator)
    clip = text_encoder(
        model_config.clip_target(), generator, {"umt5xxl_model_config": UMT5_TINY}, _umt5_tokenizer_data()
    )
    return model, clip, vae_builder(generator)


def tiny_wan21_t2v(seed: int = 0):
    """Wan 2.1 text-to-video: ComfyUI's WanModel, the umt5 encoder and a Wan 2.1 VAE."""
    return _wan_stack(detected_model_config(WAN21_LAYOUT, WAN_SHRINK, "WAN21_T2V"), tiny_wan_vae, seed)


def tiny_wan21_vace(seed: int = 0):
    """Wan 2.1 VACE: ComfyUI's VaceWanModel, the umt5 encoder and a Wan 2.1 VAE."""
    return _wan_stack(detected_model_config(WAN21_VACE_LAYOUT, WAN_SHRINK, "WAN21_Vace"), tiny_wan_vae, seed)


def tiny_wan22_t2v(seed: int = 0):
    """Wan 2.2 TI2V-5B: ComfyUI's WanModel on 48 channels, the umt5 encoder and a Wan 2.2 VAE."""
    return _wan_stack(detected_model_config(WAN22_LAYOUT, WAN_SHRINK, "WAN22_T2V"), tiny_wan22_vae, seed)


# LTX-Video (model_detection: "adaln_single..." with no pos_embed.proj): as detected, 2 blocks (real
# 28) and cross-attention at the inner width 32 (attn2.to_k's input). Detection reads that width as
# 32 heads (real: 32 of 64): split here as 2 heads of 16. The caption projection reads the T5 width
# (caption_channels, not read; real 4096); in_channels is the model's default 128, the VAE's.
LTXV_WIDTH = 32
LTXV_LAYOUT = {
    "adaln_single.emb.timestep_embedder.linear_1.bias": (LTXV_WIDTH,),
    "transformer_blocks.0.attn2.to_k.weight": (LTXV_WIDTH, LTXV_WIDTH),
    **blocks("transformer_blocks", 2),
}
LTXV_SHRINK = {"num_attention_heads": 2, "attention_head_dim": LTXV_WIDTH // 2, "caption_channels": T5_TINY["d_model"]}


def tiny_ltxv(seed: int = 0):
    """LTX-Video: ComfyUI's LTXVModel, the T5-XXL encoder and an LTX VAE."""
    generator = torch.Generator().manual_seed(seed)
    model_config = detected_model_config(LTXV_LAYOUT, LTXV_SHRINK, "LTXV")
    model = diffusion_model(model_config, generator)
    clip = text_encoder(model_config.clip_target(), generator, {"t5xxl_model_config": T5_TINY})
    return model, clip, tiny_ltxv_vae(generator)


# HunyuanVideo 1.0 (model_detection: "txt_in.individual_token_refiner..." with 3D patches): as
# detected, 1 double + 1 single block of width 32 (real: 20 + 40 of 3072), 16 latent channels at
# 1x2x2 patches, guidance-distilled (guidance_in), the Llama hidden states as text (txt_in).
# Detection takes 128-wide heads with the real head's rope axes [16, 56, 56], and clip_l's 768 for
# any vector_in: cut to 2 heads of 16 with axes summing to that, and the tiny clip_l's pooled width.
HUNYUAN_VIDEO_WIDTH = 32
_HUNYUAN_VIDEO_BLOCKS = {
    "txt_in.individual_token_refiner.blocks.0.norm1.weight": (HUNYUAN_VIDEO_WIDTH,),
    "txt_in.input_embedder.weight": (HUNYUAN_VIDEO_WIDTH, LLAMA_TINY["hidden_size"]),
    **blocks("double_blocks", 1),
    **blocks("single_blocks", 1),
}
HUNYUAN_VIDEO_LAYOUT = {
    **_HUNYUAN_VIDEO_BLOCKS,
    "img_in.proj.weight": (HUNYUAN_VIDEO_WIDTH, 16, 1, 2, 2),
    "final_layer.linear.weight": (16 * 2 * 2, HUNYUAN_VIDEO_WIDTH),
    "vector_in.in_layer.weight": (HUNYUAN_VIDEO_WIDTH, CLIP_L["hidden_size"]),
    "guidance_in.in_layer.weight": (HUNYUAN_VIDEO_WIDTH, 256),
}
_HUNYUAN_VIDEO_HEADS = {"num_heads": 2, "axes_dim": [4, 6, 6]}
HUNYUAN_VIDEO_SHRINK = {**_HUNYUAN_VIDEO_HEADS, "vec_in_dim": CLIP_L["hidden_size"]}


def tiny_hunyuan_video(seed: int = 0):
    """HunyuanVideo 1.0: ComfyUI's HunyuanVideo DiT, its Llama 3 + clip_l encoders and its VAE."""
    generator = torch.Generator().manual_seed(seed)
    model_config = detected_model_config(HUNYUAN_VIDEO_LAYOUT, HUNYUAN_VIDEO_SHRINK, "HunyuanVideo")
    model = diffusion_model(model_config, generator)
    clip = text_encoder(
        model_config.clip_target(), generator, {"clip_l_model_config": CLIP_L, "llama_model_config": LLAMA_TINY}
    )
    return model, clip, tiny_hunyuan_video_vae(generator)


# HunyuanVideo 1.5: the same DiT, detected with 1x1x1 patches, 32 latent channels out and 65 in (the
# latent, 32 channels of (empty) first-frame latent and a mask channel), the byT5 glyph and SigLIP
# inputs (SigLIP's 1152 read from vision_in: ComfyUI knows 1.5 by it), the cond-type embedding, no
# vector_in or guidance; heads and rope axes cut as for 1.0.
HUNYUAN_VIDEO15_LAYOUT = {
    **_HUNYUAN_VIDEO_BLOCKS,
    "img_in.proj.weight": (HUNYUAN_VIDEO_WIDTH, 2 * 32 + 1, 1, 1, 1),
    "final_layer.linear.weight": (32, HUNYUAN_VIDEO_WIDTH),
    "byt5_in.fc1.weight": (1,),
    "cond_type_embedding.weight": (3, HUNYUAN_VIDEO_WIDTH),
    "vision_in.proj.0.weight": (1152,),
}
HUNYUAN_VIDEO15_SHRINK = _HUNYUAN_VIDEO_HEADS
# byT5 keeps its 1472 width (the DiT's byt5_in reads it); it has no model_name in its model options,
# so SDClipModel merges the "_model_config" entry into it.
BYT5_TINY = {"num_layers": 1, "num_heads": 2, "d_kv": 16, "d_ff": 64}


def _qwen_vl_text_encoder(clip_target, generator, model_options):
    """tiny_models.text_encoder for an encoder with Qwen2.5-VL inside: its vision tower is built at
    the real size (hidden 1280, 32 layers, uninitialised memory) whatever the model options say. It
    only reads images, so a one-layer instance of the same class replaces it before the weights are
    drawn."""
    clip = comfy.sd.CLIP(target=clip_target, model_options={"dtype": torch.float32, **model_options})
    transformer = clip.cond_stage_model.qwen25_7b.transformer
    transformer.visual = comfy.text_encoders.qwen_vl.Qwen2VLVisionTransformer(
        hidden_size=32,
        output_hidden_size=LLAMA_TINY["hidden_size"],
        intermediate_size=64,
        num_heads=2,
        num_layers=1,
        dtype=torch.float32,
        ops=comfy.ops.manual_cast,
    )
    init_weights(clip.cond_stage_model, generator)
    return clip


def tiny_hunyuan_video15(seed: int = 0):
    """HunyuanVideo 1.5: ComfyUI's HunyuanVideo DiT (1.5 layout), Qwen2.5-VL + byT5 and its VAE."""
    generator = torch.Generator().manual_seed(seed)
    model_config = detected_model_config(HUNYUAN_VIDEO15_LAYOUT, HUNYUAN_VIDEO15_SHRINK, "HunyuanVideo15")
    model = diffusion_model(model_config, generator)
    clip = _qwen_vl_text_encoder(
        model_config.clip_target(), generator, {"qwen25_7b_model_config": LLAMA_TINY, "_model_config": BYT5_TINY}
    )
    return model, clip, tiny_hunyuan_video15_vae(generator)


FAMILIES = {
    "wan21_t2v": TinyFamily(
        tiny_wan21_t2v, family="Wan 2.1 text-to-video (and Wan 2.2 14B)", video_frames=VIDEO_FRAMES
    ),
    "wan21_vace": TinyFamily(tiny_wan21_vace, family="Wan 2.1 VACE", video_frames=VIDEO_FRAMES),
    "wan22_t2v": TinyFamily(tiny_wan22_t2v, family="Wan 2.2 TI2V 5B", video_frames=VIDEO_FRAMES),
    "ltxv": TinyFamily(tiny_ltxv, family="LTX-Video", video_frames=VIDEO_FRAMES),
    "hunyuan_video": TinyFamily(tiny_hunyuan_video, family="HunyuanVideo", video_frames=VIDEO_FRAMES),
    "hunyuan_video15": TinyFamily(tiny_hunyuan_video15, family="HunyuanVideo 1.5", video_frames=VIDEO_FRAMES),
}
