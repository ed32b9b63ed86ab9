"""The tiny LTX stacks: LTX-Video (ComfyUI's LTXVModel, the T5-XXL encoder, an LTX VAE) and LTX-2
(ComfyUI's LTXAV audio-video DiT trained on its video stream, its Gemma 3 text encoder, its video VAE
and, for sound, its audio VAE); see tiny_stack."""

import json

import comfy.ldm.lightricks.vae.causal_video_autoencoder as ltx_vae
import comfy.sd
import comfy.supported_models_base
import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_stack import T5_TINY, VIDEO_FRAMES, TinyFamily, borrowed_spiece_model, zeroed
from eridiffusion.tiny_models import diffusion_model, init_weights, text_encoder


def _neutral_channel_statistics(stats):
    """Set an LTX VAE's per-channel latent statistics, built empty (a checkpoint carries them), to
    mean 0 and standard deviation 1."""
    stats.get_buffer("mean-of-means").zero_()
    stats.get_buffer("std-of-means").fill_(1.0)


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
    _neutral_channel_statistics(model.per_channel_statistics)
    return comfy.sd.VAE(sd=model.state_dict(), metadata={"config": json.dumps({"vae": LTXV_VAE})}, dtype=torch.float32)


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


# LTX-2 (model_detection "adaln_single…" plus "audio_adaln_single…": LTXAV): 2 audio-video blocks
# instead of 48. Detection reads the head width as the attn2 width / 32 (real: 32 heads of 128);
# the head counts are cut to 2 for both streams, both 16 wide (real audio: 32 of 64), so each
# stream's cross-attention reads a 32-wide context. The text connectors (real: 30 heads of 128 =
# the 3840-wide Gemma projection, caption_channels) are 2 heads of 16 over a 32-wide projection.
LTX2_HEAD = 16
LTX2_WIDTH = 2 * LTX2_HEAD
LTX2_LAYOUT = {
    "adaln_single.emb.timestep_embedder.linear_1.bias": (1,),
    "audio_adaln_single.linear.weight": (1,),
    "transformer_blocks.0.attn2.to_k.weight": (32 * LTX2_HEAD, LTX2_WIDTH),
    **blocks("transformer_blocks", 2),
}
LTX2_SHRINK = {
    "num_attention_heads": 2,
    "audio_num_attention_heads": 2,
    "audio_attention_head_dim": LTX2_HEAD,
    "audio_cross_attention_dim": LTX2_WIDTH,
    "caption_channels": LTX2_WIDTH,
    "connector_attention_head_dim": LTX2_HEAD,
    "connector_num_attention_heads": 2,
}

# Gemma 3 12B as LTX-2 reads it: every hidden state (embeddings + each layer), each token's stack
# flattened and projected to caption_channels. Two layers; head_dim stays the class's 256.
GEMMA3_TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
}


def tiny_gemma3_text_encoder(generator):
    """ComfyUI's LTX-2 text encoder (Gemma 3 12B + its text_embedding_projection), shrunk. Two parts
    keep their full size whatever the model options say: the SigLIP vision tower (it reads image
    prompts only, so it stays as zeros, like the Qwen2.5-VL towers in tiny_stack) and the projection,
    Linear(3840 x 49, 3840), which is rebuilt with the same ops at the tiny encoder's widths."""
    import comfy.text_encoders.lt

    target = comfy.supported_models_base.ClipTarget(
        comfy.text_encoders.lt.LTXAVGemmaTokenizer, comfy.text_encoders.lt.ltxav_te()
    )
    # LTXAVTEModel is no SD1ClipModel, so its Gemma has no model_name in its model options and
    # SDClipModel merges the "_model_config" entry into its config.
    clip = comfy.sd.CLIP(
        target=target,
        model_options={"dtype": torch.float32, "_model_config": GEMMA3_TINY},
        tokenizer_data=borrowed_spiece_model(),
    )
    encoder = clip.cond_stage_model
    gemma = encoder.gemma3_12b.transformer
    vision = gemma.vision_model
    del gemma.vision_model  # out of init_weights' reach
    hidden_states = GEMMA3_TINY["num_hidden_layers"] + 1
    encoder.text_embedding_projection = encoder.gemma3_12b.operations.Linear(
        GEMMA3_TINY["hidden_size"] * hidden_states, LTX2_WIDTH, bias=False, dtype=torch.float32
    )
    init_weights(encoder, generator)
    gemma.vision_model = zeroed(vision)
    return clip


# LTX-2's video VAE: ComfyUI's LTX VideoVAE in the layout it assumes for an LTX-2 VAE file without
# config metadata (causal_video_autoencoder.VideoVAE.get_default_config(2): 4x4 patchify, then
# residual space, time and space-time compressions = 32x spatial, 8x temporal, 128 latent
# channels), one layer per res block and 8 base channels instead of 2-6 layers and 128.
LTX2_VAE = {
    "_class_name": "CausalVideoAutoencoder",
    "dims": 3,
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 128,
    "encoder_blocks": [
        ["res_x", {"num_layers": 1}],
        ["compress_space_res", {"multiplier": 2}],
        ["res_x", {"num_layers": 1}],
        ["compress_time_res", {"multiplier": 2}],
        ["res_x", {"num_layers": 1}],
        ["compress_all_res", {"multiplier": 2}],
        ["res_x", {"num_layers": 1}],
        ["compress_all_res", {"multiplier": 2}],
        ["res_x", {"num_layers": 1}],
    ],
    "decoder_blocks": [
        ["res_x", {"num_layers": 1, "inject_noise": False}],
        ["compress_all", {"residual": True, "multiplier": 2}],
        ["res_x", {"num_layers": 1, "inject_noise": False}],
        ["compress_all", {"residual": True, "multiplier": 2}],
        ["res_x", {"num_layers": 1, "inject_noise": False}],
        ["compress_all", {"residual": True, "multiplier": 2}],
        ["res_x", {"num_layers": 1, "inject_noise": False}],
    ],
    "encoder_base_channels": 8,
    "decoder_base_channels": 8,
    "scaling_factor": 1.0,
    "norm_layer": "pixel_norm",
    "patch_size": 4,
    "latent_log_var": "uniform",
    "use_quant_conv": False,
    "causal_decoder": False,
    "timestep_conditioning": True,
}


def tiny_ltx2_vae(generator):
    """ComfyUI's LTX-2 video VAE at 8 base channels, as comfy.sd.VAE builds it from a checkpoint's
    config metadata."""
    model = ltx_vae.VideoVAE(config=LTX2_VAE)
    init_weights(model, generator)
    _neutral_channel_statistics(model.per_channel_statistics)
    return comfy.sd.VAE(sd=model.state_dict(), metadata={"config": json.dumps({"vae": LTX2_VAE})}, dtype=torch.float32)


# LTX-2's audio VAE (mel autoencoder + vocoder, comfy.ldm.lightricks.vae.audio_vae.AudioVAE) as comfy.sd.VAE
# builds it from a checkpoint's config metadata: 64 mel bins at 16 kHz (hop 160), compressed 4x in time
# and frequency to 8 channels x 16 bins, 25 latents a second, as the real one, at 8 base channels (real
# 128) and a vocoder 32 wide with one resblock kernel (real: 1024, three) upsampling 160x back to 16 kHz.
LTX2_AUDIO_VAE = {
    "audio_vae": {
        "model": {
            "params": {
                "ddconfig": {
                    "double_z": True,
                    "mel_bins": 64,
                    "z_channels": 8,
                    "resolution": 256,
                    "downsample_time": False,
                    "in_channels": 2,
                    "out_ch": 2,
                    "ch": 8,
                    "ch_mult": [1, 2, 4],
                    "num_res_blocks": 1,
                    "attn_resolutions": [],
                    "dropout": 0.0,
                    "mid_block_add_attention": False,
                    "norm_type": "pixel",
                    "causality_axis": "height",
                },
                "sampling_rate": 16000,
            }
        },
        "preprocessing": {"stft": {"filter_length": 1024, "hop_length": 160}},
    },
    "vocoder": {
        "resblock_kernel_sizes": [3],
        "upsample_rates": [5, 4, 2, 2, 2],
        "upsample_kernel_sizes": [10, 8, 4, 4, 4],
        "resblock_dilation_sizes": [[1, 3, 5]],
        "upsample_initial_channel": 32,
        "stereo": True,
        "output_sample_rate": 16000,
    },
}


def tiny_ltx2_audio_vae(seed: int = 0):
    """ComfyUI's LTX-2 audio VAE (LTXVAudioVAELoader's), tiny, random init."""
    import comfy.ldm.lightricks.vae.audio_vae as audio_vae

    metadata = {"config": json.dumps(LTX2_AUDIO_VAE)}
    model = audio_vae.AudioVAE(metadata=metadata)
    init_weights(model, torch.Generator().manual_seed(seed))
    _neutral_channel_statistics(model.autoencoder.per_channel_statistics)
    return comfy.sd.VAE(sd=model.state_dict(), metadata=metadata)


def tiny_ltx2(seed: int = 0):
    """LTX-2: ComfyUI's LTXAV audio-video DiT (trained on its video stream), its Gemma 3 text
    encoder and its video VAE."""
    generator = torch.Generator().manual_seed(seed)
    model_config = detected_model_config(LTX2_LAYOUT, LTX2_SHRINK, "LTXAV")
    model = diffusion_model(model_config, generator)
    return model, tiny_gemma3_text_encoder(generator), tiny_ltx2_vae(generator)


FAMILIES = {
    "ltxv": TinyFamily(tiny_ltxv, family="LTX-Video", video_frames=VIDEO_FRAMES),
    "ltx2": TinyFamily(
        tiny_ltx2,
        family="LTX-2 (video, and its audio with the audio VAE)",
        video_frames=VIDEO_FRAMES,
        needs=("LTXAV",),
        since="0.28.0",
    ),
}
