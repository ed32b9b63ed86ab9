"""A tiny random-init ACE-Step 1.5 stack (text-to-music) built from ComfyUI's own classes: the DiT as
the host's model detection reads it, its Qwen3 text encoders shrunk with the real Qwen3 tokenizer,
and the host's 48 kHz Oobleck audio VAE at a small width; see tiny_stack. Import after
runtime.start_host() (ComfyUI 0.28 or later: the host must have the ACEStep15 class)."""

import comfy.ldm.audio.autoencoder
import comfy.sd
import comfy.supported_models_base
import numpy as np
import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.music_clips import STYLES, synthesize
from devkit.tiny_stack import LLAMA_TINY_4_LAYERS, TinyFamily
from devkit.tiny_vaes import vae_of_layout
from eridiffusion.tiny_models import diffusion_model, init_weights, text_encoder

# model_detection's ACE-Step 1.5 branch reads the DiT and lyric-encoder widths, feed-forward widths
# and head counts (q_proj rows / 128) from these keys and counts decoder.layers. The real 2B DiT is
# 2048 wide with 24 layers; here 128 wide, 2 layers, 8 heads of 16 (detection hard-codes 128-wide
# heads). 128 wide at least: the frozen output conv maps the width to 2 latent frames of 64 channels,
# and a narrower model could only ever predict a subspace of them, whatever its adapters learn.
ACE15_WIDTH = 128
ACE15_HEADS = 8
ACE15_LAYOUT = {
    "decoder.layers.0.self_attn_norm.weight": (ACE15_WIDTH,),
    "decoder.layers.0.mlp.gate_proj.weight": (2 * ACE15_WIDTH, ACE15_WIDTH),
    "decoder.layers.0.self_attn.q_proj.weight": (ACE15_HEADS * 128, ACE15_WIDTH),
    "encoder.lyric_encoder.layers.0.input_layernorm.weight": (ACE15_WIDTH,),
    "encoder.lyric_encoder.layers.0.self_attn.q_proj.weight": (ACE15_HEADS * 128, ACE15_WIDTH),
    "encoder.lyric_encoder.layers.0.mlp.gate_proj.weight": (2 * ACE15_WIDTH, ACE15_WIDTH),
    **blocks("decoder.layers", 2),
}
# What detection leaves at the full model's values: head width, key/value heads, the encoders' depths,
# the audio tokenizer's width (the condition encoder's) and the text width (Qwen3-0.6B's, 1024 real).
ACE15_SHRINK = {
    "head_dim": 16,
    "num_kv_heads": 1,
    "num_lyric_layers": 1,
    "num_timbre_layers": 1,
    "num_tokenizer_layers": 1,
    "fsq_dim": ACE15_WIDTH,
    "text_hidden_dim": LLAMA_TINY_4_LAYERS["hidden_size"],
}

# comfy.sd.VAE recognises the ACE-Step 1.5 VAE (an Oobleck VAE at 48 kHz, 1920 samples per latent
# frame, 64 latent channels) by a snake beta and a 12-tap (stride 6) weight-normed conv in its
# decoder; its width (128) is fixed there, so the tiny one replaces the model it builds.
ACE15_VAE_LAYOUT = {
    "decoder.layers.1.layers.0.beta": (2048,),
    "decoder.layers.2.layers.1.weight_v": (1024, 512, 12),
}
ACE15_VAE_STRIDES = [2, 4, 4, 6, 10]


def tiny_ace15_vae(generator, channels=4):
    """ComfyUI's Oobleck audio VAE of ACE-Step 1.5 at width `channels` (real: 128), random init: the
    convolutions' weight-normed directions from `generator` with their norms as gains (so each conv
    is its drawn weight), the snake activations at their built values (log-scale 0)."""
    model = comfy.ldm.audio.autoencoder.AudioOobleckVAE(channels=channels, strides=ACE15_VAE_STRIDES)
    init_weights(model, generator)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith((".alpha", ".beta")):
                p.zero_()
        for module in model.modules():
            parametrizations = getattr(module, "parametrizations", None)
            if parametrizations is not None and "weight" in parametrizations:
                g, v = parametrizations.weight.original0, parametrizations.weight.original1
                g.copy_(torch.linalg.vector_norm(v, dim=tuple(range(1, v.dim())), keepdim=True))
        _calibrate_latents(model)
    return vae_of_layout(ACE15_VAE_LAYOUT, model)


def _calibrate_latents(model):
    """Scale the encoder's last conv so music (synthesized clips of both styles) encodes to latents of
    standard deviation about 1 (the real VAE's scale, which the diffusion model's noise is drawn at),
    and its log-scale half far negative: a trained VAE's posterior is narrow, a random one's would
    drown the mean in noise."""
    last = model.encoder.layers[-1]
    weight = last.parametrizations.weight
    half = weight.original1.shape[0] // 2
    clips = [synthesize(style, 0, seconds=1.0, rate=48000)[0] for style in STYLES]
    probe = torch.from_numpy(np.stack(clips)).movedim(1, 2)
    mean = model.encoder(probe)[:, :half]
    weight.original0[:half] /= mean.std()
    last.bias[:half] -= mean.mean() / mean.std()
    weight.original0[half:] = 0.0
    last.bias[half:] = -10.0


def tiny_ace_step15(seed: int = 0):
    """ACE-Step 1.5: ComfyUI's AceStepConditionGenerationModel, its Qwen3-0.6B text/lyric encoder and
    Qwen3 LM (both shrunk; the LM only writes audio codes, which training does not ask for) with the
    real Qwen3 tokenizer, and its 48 kHz audio VAE."""
    import comfy.text_encoders.ace15  # (ComfyUI 0.28 on: the module is absent from older hosts)

    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(ACE15_LAYOUT, ACE15_SHRINK, "ACEStep15")
    model = diffusion_model(config, generator)
    # clip_target() reads the LM's size from the checkpoint's text-encoder keys; the CLIPLoader's
    # "ace" type builds the same target (comfy.sd: te(lm_model=...), ACE15Tokenizer).
    target = comfy.supported_models_base.ClipTarget(
        comfy.text_encoders.ace15.ACE15Tokenizer, comfy.text_encoders.ace15.te(lm_model="qwen3_2b")
    )
    clip = text_encoder(target, generator, {"_model_config": LLAMA_TINY_4_LAYERS})
    return model, clip, tiny_ace15_vae(generator)


AUDIO_SECONDS = 2.0  # training and sample clips: 50 latent frames at 48 kHz / 1920

FAMILIES = {
    "ace_step15": TinyFamily(
        tiny_ace_step15,
        family="ACE-Step 1.5",
        audio_seconds=AUDIO_SECONDS,
        needs=("ACEStep15",),
        since="0.28.0",
    ),
}
