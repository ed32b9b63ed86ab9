"""Tiny random-init stacks of the video classes without a row before 2026's round (Wan 2.1 Fun
Control, Wan 2.2 Animate and S2V, CogVideoX text-to-video, Mochi), built from ComfyUI's own
classes; see tiny_models.

Each diffusion model is the config the host's own model detection reads from a tiny state-dict
layout (detected_configs), with the sizes detection hard-codes cut down, so block names (and LoRA
keys) are the real ones. The Wan variants reuse tiny_video's Wan layout, umt5 encoder and VAEs.
They train from captions alone: their control, reference, pose, face or audio inputs stay at the
empty values ComfyUI's model_base gives them when no conditioning node sets them."""

import comfy.ldm.genmo.vae.model as mochi_vae
import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_models import TinyFamily
from devkit.tiny_video import T5_TINY, VIDEO_FRAMES, WAN_SHRINK, WAN_WIDTH, _vae_of_layout, _wan_layout, _wan_stack
from devkit.tiny_video_vae import tiny_wan_vae
from eridiffusion.tiny_models import diffusion_model, init_weights, text_encoder

# Wan 2.1 Fun Control (model_detection: model_type "i2v", which the CLIP-vision projection
# img_emb.proj.0 marks, on 48 input channels): the 16-channel latent plus 32 channels of control
# video latent that model_base.WAN21.concat_cond fills with zeros when no control video is given.
# img_emb reads CLIP vision's 1280 (hard-coded by the class); without a CLIP-vision output the
# image cross-attention reads the text, as in ComfyUI with no clip_vision_output.
WAN21_FUN_CONTROL_LAYOUT = {
    **_wan_layout(16),
    "patch_embedding.weight": (WAN_WIDTH, 48, 1, 2, 2),
    "img_emb.proj.0.bias": (1280,),
}


def tiny_wan21_fun_control(seed: int = 0):
    """Wan 2.1 Fun Control: ComfyUI's WanModel (i2v, 48 channels in), the umt5 encoder and a Wan 2.1 VAE."""
    model_config = detected_model_config(WAN21_FUN_CONTROL_LAYOUT, WAN_SHRINK, "WAN21_FunControl2V")
    return _wan_stack(model_config, tiny_wan_vae, seed)


# Wan 2.2 Animate (model_detection: model_type "animate", which face_adapter.fuser_blocks marks):
# ComfyUI's AnimateWanModel, an i2v WanModel on 36 input channels (the latent plus the 20 channels of
# reference-image latent and mask that model_base.WAN21.concat_cond fills with zeros without a
# reference), with pose and face inputs that it skips when absent (no pose_video_latent, no
# face_video_pixels). The class builds one face-fuser block per five blocks (real 40 blocks, 8
# fusers), so five blocks here keep one fuser and its LoRA keys. The motion and face encoders keep
# the widths the class hard-codes (512 and 1024).
WAN22_ANIMATE_LAYOUT = {
    **_wan_layout(16),
    "patch_embedding.weight": (WAN_WIDTH, 36, 1, 2, 2),
    "face_adapter.fuser_blocks.0.k_norm.weight": (1,),
    **blocks("blocks", 5),
}


def tiny_wan22_animate(seed: int = 0):
    """Wan 2.2 Animate: ComfyUI's AnimateWanModel, the umt5 encoder and a Wan 2.1 VAE."""
    model_config = detected_model_config(WAN22_ANIMATE_LAYOUT, WAN_SHRINK, "WAN22_Animate")
    return _wan_stack(model_config, tiny_wan_vae, seed)


# Wan 2.2 S2V (model_detection: model_type "s2v", which the audio encoder's final_linear marks):
# ComfyUI's WanModel_S2V on the 16-channel latent. Its audio embedding, reference latent, reference
# motion and control video are inputs it skips when absent, as WanSoundImageToVideo leaves them
# without audio or images. The class builds its audio injectors for the real 40 blocks' indices
# whatever the block count (unused ones stay, so their LoRA keys are the real ones).
WAN22_S2V_LAYOUT = {**_wan_layout(16), "casual_audio_encoder.encoder.final_linear.weight": (1,)}


def tiny_wan22_s2v(seed: int = 0):
    """Wan 2.2 S2V: ComfyUI's WanModel_S2V, the umt5 encoder and a Wan 2.1 VAE."""
    model_config = detected_model_config(WAN22_S2V_LAYOUT, WAN_SHRINK, "WAN22_S2V")
    return _wan_stack(model_config, tiny_wan_vae, seed)


# CogVideoX text-to-video, as CogVideoX-2b (model_detection: "blocks.0.norm1.linear.weight", whose
# shape gives the width (6 x dim) and the time-embedding width): 2 blocks 48 wide (real: 30 of
# 1920), a 2x2 patch on 16 latent channels and learned (sin-cos) positional embeddings, which the
# pos_embedding key marks. Its 3-D sin-cos table splits the width 1/3 time, 2/3 space, so the width
# stays a multiple of 12. Detection takes 64-wide heads: cut to 2 heads of 24 (real: 30 of 64).
# text_proj reads the T5 width (real 4096).
COGVIDEOX_WIDTH = 48
COGVIDEOX_LAYOUT = {
    "blocks.0.norm1.linear.weight": (6 * COGVIDEOX_WIDTH, COGVIDEOX_WIDTH),
    "patch_embed.proj.weight": (COGVIDEOX_WIDTH, 16, 2, 2),
    "patch_embed.text_proj.weight": (COGVIDEOX_WIDTH, T5_TINY["d_model"]),
    "patch_embed.pos_embedding": (1,),
    **blocks("blocks", 2),
}
COGVIDEOX_SHRINK = {"num_attention_heads": 2, "attention_head_dim": COGVIDEOX_WIDTH // 2}
# comfy.sd.VAE recognises the CogVideoX VAE by a causal 3D decoder conv_in with a spatially-normed
# mid block, and reads the latent channels from the encoder's conv_out (2 x 16); the class fixes
# its widths (128..512, 3 layers per block, 32 norm groups), cut here to 8..32, 1 layer, 8 groups.
COGVIDEOX_VAE_LAYOUT = {
    "decoder.conv_in.conv.weight": (512, 16, 3, 3, 3),
    "decoder.mid_block.resnets.0.norm1.norm_layer.weight": (512,),
    "encoder.conv_out.conv.weight": (2 * 16, 512, 3, 3, 3),
}


def tiny_cogvideox_vae(generator):
    """ComfyUI's CogVideoX VAE (16 channels, 8x spatial, 4x temporal) at widths 8..32."""
    import comfy.ldm.cogvideo.vae  # ComfyUI 0.2x: imported where used, so older hosts import this module

    model = comfy.ldm.cogvideo.vae.AutoencoderKLCogVideoX(
        block_out_channels=(8, 16, 16, 32), layers_per_block=1, groups=8
    )
    init_weights(model, generator)
    return _vae_of_layout(COGVIDEOX_VAE_LAYOUT, model)


def tiny_cogvideox_t2v(seed: int = 0):
    """CogVideoX text-to-video: ComfyUI's CogVideoX transformer, T5-XXL and the CogVideoX VAE. The text
    encoder is the one CLIPLoader builds for type "cogvideox": CogVideoX_T2V.clip_target() names the
    bare T5XXLModel, which comfy.sd.CLIP cannot hold (it has no `dtypes`), so ComfyUI only ever
    loads CogVideoX's T5 through that loader."""
    import comfy.supported_models_base
    import comfy.text_encoders.cogvideo  # ComfyUI 0.2x, as above

    generator = torch.Generator().manual_seed(seed)
    model_config = detected_model_config(COGVIDEOX_LAYOUT, COGVIDEOX_SHRINK, "CogVideoX_T2V")
    model = diffusion_model(model_config, generator)
    target = comfy.supported_models_base.ClipTarget(
        comfy.text_encoders.cogvideo.CogVideoXTokenizer, comfy.text_encoders.cogvideo.cogvideo_te()
    )
    clip = text_encoder(target, generator, {"t5xxl_model_config": T5_TINY})
    return model, clip, tiny_cogvideox_vae(generator)


# Genmo Mochi (model_detection: "t5_yproj.weight"; every size is hard-coded there): 2 joint blocks
# (real 48), the visual stream and the text stream 32 wide in 2 heads (real 3072 / 1536 in 24), the
# T5 width (real 4096). The joint block asserts its visual MLP is the real 12288 wide, so the MLP
# ratio is 12288 / 32 and the visual feed-forward keeps its real inner width (8192).
MOCHI_WIDTH = 32
MOCHI_SHRINK = {
    "depth": 2,
    "num_heads": 2,
    "hidden_size_x": MOCHI_WIDTH,
    "hidden_size_y": MOCHI_WIDTH,
    "mlp_ratio_x": 12288 / MOCHI_WIDTH,
    "t5_feat_dim": T5_TINY["d_model"],
}
# Mochi's VAE (12 channels, 8x spatial, 6x temporal: 6k+1 frames) is comfy.ldm.genmo's VideoVAE, whose
# constructor fixes its encoder (64 base channels, x1/2/4/6) and decoder (128 base); comfy.sd.VAE
# recognises it by a decoder key at its real shape. The tiny one is the same class with the same
# encoder and decoder classes at 32 base channels (the norms' 32 groups), x1/2/3/4 (each level must
# widen), one res block per level, attention where the real encoder has it.
MOCHI_VAE_LAYOUT = {"decoder.blocks.2.blocks.3.stack.5.weight": (512, 512, 3, 3, 3)}
MOCHI_VAE_LEVELS = {"base_channels": 32, "channel_multipliers": [1, 2, 3, 4], "num_res_blocks": [1] * 5}
MOCHI_FRAMES = 7  # 6k+1: the clip length the Mochi VAE decodes to (9-frame clips train as 7)


def tiny_mochi_vae(generator):
    """ComfyUI's Mochi VideoVAE at 32..128 channels (real: 64..384 encoding, 128..768 decoding)."""
    model = mochi_vae.VideoVAE.__new__(mochi_vae.VideoVAE)
    torch.nn.Module.__init__(model)
    model.encoder = mochi_vae.Encoder(
        in_channels=15,  # RGB plus its Fourier features
        latent_dim=12,
        temporal_reductions=[1, 2, 3],
        spatial_reductions=[2, 2, 2],
        prune_bottlenecks=[False] * 5,
        has_attentions=[False, True, True, True, True],
        input_is_conv_1x1=True,
        padding_mode="replicate",
        **MOCHI_VAE_LEVELS,
    )
    model.decoder = mochi_vae.Decoder(
        latent_dim=12,
        temporal_expansions=[1, 2, 3],
        spatial_expansions=[2, 2, 2],
        has_attention=[False] * 5,
        padding_mode="replicate",
        output_norm=False,
        **MOCHI_VAE_LEVELS,
    )
    init_weights(model, generator)
    return _vae_of_layout(MOCHI_VAE_LAYOUT, model)


def tiny_mochi(seed: int = 0):
    """Genmo Mochi: ComfyUI's AsymmDiTJoint, its T5-XXL encoder and its VAE."""
    generator = torch.Generator().manual_seed(seed)
    model_config = detected_model_config({"t5_yproj.weight": (1,)}, MOCHI_SHRINK, "GenmoMochi")
    model = diffusion_model(model_config, generator)
    clip = text_encoder(model_config.clip_target(), generator, {"t5xxl_model_config": T5_TINY})
    return model, clip, tiny_mochi_vae(generator)


FAMILIES: dict = {
    "wan21_fun_control": TinyFamily(
        tiny_wan21_fun_control,
        family="Wan 2.1 Fun Control",
        video_frames=VIDEO_FRAMES,
        needs=("WAN21_FunControl2V",),
    ),
    "wan22_animate": TinyFamily(
        tiny_wan22_animate,
        family="Wan 2.2 Animate",
        video_frames=VIDEO_FRAMES,
        needs=("WAN22_Animate",),
    ),
    "wan22_s2v": TinyFamily(
        tiny_wan22_s2v,
        family="Wan 2.2 S2V",
        video_frames=VIDEO_FRAMES,
        needs=("WAN22_S2V",),
    ),
    "cogvideox_t2v": TinyFamily(
        tiny_cogvideox_t2v,
        family="CogVideoX text-to-video",
        video_frames=VIDEO_FRAMES,
        needs=("CogVideoX_T2V",),
        since="0.28.0",
    ),
    "mochi": TinyFamily(
        tiny_mochi,
        family="Genmo Mochi",
        video_frames=MOCHI_FRAMES,
        needs=("GenmoMochi",),
    ),
}
