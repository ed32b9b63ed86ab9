"""Tiny random-init stacks of the video families newer ComfyUI versions added (0.2x), built from
ComfyUI's own classes; see tiny_models. Each TinyFamily names the classes it needs, so on a host
without them its tests are skipped with that reason.

Kandinsky 5 (video) and LTX-2 (its video stream): each diffusion model is the config the host's own
model detection reads from a tiny state-dict layout, with the sizes detection hard-codes cut down,
so block names (and LoRA keys) are the real ones. Text encoders are the family's comfy.text_encoders
classes shrunk through "<name>_model_config" model options; VAEs are the family's ComfyUI VAE
classes at small widths."""

import json
import os

import comfy.sd
import comfy.supported_models_base
import comfy.text_encoders.aura_t5
import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_dit import qwen_vl_text_encoder
from devkit.tiny_models import TinyFamily
from devkit.tiny_video import LLAMA_TINY, VIDEO_FRAMES, tiny_hunyuan_video_vae
from eridiffusion.tiny_models import CLIP_L, diffusion_model, init_weights

# Kandinsky 5 Video Lite (model_detection "visual_transformer_blocks.0.cross_attention.key_norm"):
# 2 text + 2 visual blocks 64 wide (real: 2 + 32 of 1792). The visual embedding reads 132 = 4 x 33
# values per 1x2x2 patch: 16 latent channels, 16 of (empty) first-frame latent and a mask channel
# (model_base.Kandinsky5.concat_cond). Detection sets the rope axes only for the real widths, so
# they are cut to 8:12:12 (real 16:24:24): two heads of 32. The text widths are not detected: the
# Qwen2.5-VL hidden states and the clip_l pooled vector of the tiny encoders.
KANDINSKY5_WIDTH = 64
KANDINSKY5_LAYOUT = {
    "visual_transformer_blocks.0.cross_attention.key_norm.weight": (32,),
    "visual_embeddings.in_layer.weight": (KANDINSKY5_WIDTH, 132),
    "visual_embeddings.in_layer.bias": (KANDINSKY5_WIDTH,),
    "time_embeddings.in_layer.bias": (32,),
    "visual_transformer_blocks.0.feed_forward.in_layer.weight": (2 * KANDINSKY5_WIDTH, KANDINSKY5_WIDTH),
    **blocks("text_transformer_blocks", 2),
    **blocks("visual_transformer_blocks", 2),
}
KANDINSKY5_SHRINK = {
    "axes_dims": (8, 12, 12),
    "in_text_dim": LLAMA_TINY["hidden_size"],
    "in_text_dim2": CLIP_L["hidden_size"],
}


def tiny_kandinsky5(seed: int = 0):
    """Kandinsky 5 Video: ComfyUI's Kandinsky5 DiT, its Qwen2.5-VL-7B + clip_l encoders and the
    HunyuanVideo VAE it decodes with."""
    generator = torch.Generator().manual_seed(seed)
    model_config = detected_model_config(KANDINSKY5_LAYOUT, KANDINSKY5_SHRINK, "Kandinsky5")
    model = diffusion_model(model_config, generator)
    clip = qwen_vl_text_encoder(
        model_config.clip_target(), generator, {"qwen25_7b_model_config": LLAMA_TINY, "clip_l_model_config": CLIP_L}
    )
    return model, clip, tiny_hunyuan_video_vae(generator)


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


def _borrowed_spiece_model():
    # Gemma's sentencepiece model travels inside its checkpoint ("spiece_model"), not with ComfyUI:
    # the tiny encoder borrows the one ComfyUI ships (pile-T5's, 32000 pieces, all valid ids of
    # Gemma 3's 262208-entry embedding); only the token ids differ.
    path = os.path.join(os.path.dirname(comfy.text_encoders.aura_t5.__file__), "t5_pile_tokenizer", "tokenizer.model")
    with open(path, "rb") as f:
        return {"spiece_model": f.read()}


def _zeroed(module):
    """`module` with every parameter a zero broadcast from one element: no memory, no init time."""
    for sub in module.modules():
        for key, p in list(sub.named_parameters(recurse=False)):
            setattr(sub, key, torch.nn.Parameter(torch.zeros((), dtype=p.dtype).expand(p.shape), requires_grad=False))
    return module


def tiny_gemma3_text_encoder(generator):
    """ComfyUI's LTX-2 text encoder (Gemma 3 12B + its text_embedding_projection), shrunk. Two parts
    keep their full size whatever the model options say: the SigLIP vision tower (it reads image
    prompts only, so it stays as zeros, like the Qwen2.5-VL towers in tiny_dit) and the projection,
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
        tokenizer_data=_borrowed_spiece_model(),
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
    gemma.vision_model = _zeroed(vision)
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
    import comfy.ldm.lightricks.vae.causal_video_autoencoder as ltx_vae

    model = ltx_vae.VideoVAE(config=LTX2_VAE)
    init_weights(model, generator)
    stats = model.per_channel_statistics  # built empty; a checkpoint carries them
    stats.get_buffer("mean-of-means").zero_()
    stats.get_buffer("std-of-means").fill_(1.0)
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
    stats = model.autoencoder.per_channel_statistics  # built empty; a checkpoint carries them
    stats.get_buffer("mean-of-means").zero_()
    stats.get_buffer("std-of-means").fill_(1.0)
    return comfy.sd.VAE(sd=model.state_dict(), metadata=metadata)


def tiny_ltx2(seed: int = 0):
    """LTX-2: ComfyUI's LTXAV audio-video DiT (trained on its video stream), its Gemma 3 text
    encoder and its video VAE."""
    generator = torch.Generator().manual_seed(seed)
    model_config = detected_model_config(LTX2_LAYOUT, LTX2_SHRINK, "LTXAV")
    model = diffusion_model(model_config, generator)
    return model, tiny_gemma3_text_encoder(generator), tiny_ltx2_vae(generator)


FAMILIES = {
    "kandinsky5": TinyFamily(
        tiny_kandinsky5,
        family="Kandinsky 5.0 Video (Lite, Pro)",
        video_frames=VIDEO_FRAMES,
        needs=("Kandinsky5",),
        since="0.28.0",
    ),
    "ltx2": TinyFamily(
        tiny_ltx2,
        family="LTX-2 (video, and its audio with the audio VAE)",
        video_frames=VIDEO_FRAMES,
        needs=("LTXAV",),
        since="0.28.0",
    ),
}
