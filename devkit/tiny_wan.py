"""The tiny Wan stacks: Wan 2.1 text-to-video, VACE, image-to-video and Fun Control, Wan 2.2 TI2V 5B,
I2V 14B (one expert), Animate and S2V. Each is ComfyUI's WanModel (or the variant class detection
picks) on the Wan layout at tiny widths, the umt5 encoder on a borrowed sentencepiece model, and a
narrowed Wan 2.1 or 2.2 VAE; see tiny_stack. The variants train from captions alone (their control,
reference, pose, face or audio inputs stay at the empty values ComfyUI's model_base gives them when
no conditioning node sets them); the image-to-video ones train with CacheLatents' start_image on."""

import comfy.ldm.wan.vae2_2
import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_stack import T5_TINY, VIDEO_FRAMES, TinyFamily, borrowed_spiece_model
from devkit.tiny_vaes import WAN_VAE_LEVELS, gammas_to_one, tiny_wan21_vae, vae_of_layout
from eridiffusion.tiny_models import diffusion_model, init_weights, text_encoder

# comfy.sd.VAE recognises the Wan 2.2 VAE by a middle-block RMS_norm plus a residual conv in the
# first up block (dim 160, decoder 256 wide, 48 channels, 16x spatial by a 2x2 patchify, 4x temporal).
WAN22_VAE_LAYOUT = {
    "decoder.middle.0.residual.0.gamma": (1024, 1, 1, 1),
    "decoder.upsamples.0.upsamples.0.residual.2.weight": (1024, 1024, 3, 3, 3),
}


def tiny_wan22_vae(generator):
    """ComfyUI's Wan 2.2 VAE (48 channels, 16x spatial, 4x temporal) at width 8 (real: 160/256)."""
    model = comfy.ldm.wan.vae2_2.WanVAE(dim=8, dec_dim=8, z_dim=48, **WAN_VAE_LEVELS)
    init_weights(model, generator)
    gammas_to_one(model)
    return vae_of_layout(WAN22_VAE_LAYOUT, model)


# umt5's vocabulary sized to the borrowed sentencepiece model (its own travels inside the umt5
# checkpoint as "spiece_model").
UMT5_TINY = {**T5_TINY, "vocab_size": 32000}

# Wan 2.1 (model_detection: "head.modulation"): as detected, 2 blocks of width 32 with a 64-wide
# feed-forward (real 1.3B: 30 of 1536 and 8960), latent channels in (patch_embedding) and out
# (head); detection takes 128-wide heads, cut to two of 16 (real: 12 of 128). text_dim is the umt5
# width (real 4096, not read).
WAN_WIDTH = 32


def wan_layout(latent_channels, width=WAN_WIDTH):
    """The Wan keys detection reads, for a model `width` wide on `latent_channels` latent channels."""
    return {
        "head.modulation": (1, 2, width),
        "head.head.weight": (latent_channels * 2 * 2, width),
        "patch_embedding.weight": (width, latent_channels, 1, 2, 2),
        "blocks.0.ffn.0.weight": (2 * width, width),
        **blocks("blocks", 2),
    }


WAN21_LAYOUT = wan_layout(16)
WAN_SHRINK = {"num_heads": 2, "text_dim": UMT5_TINY["d_model"]}
# VACE adds control blocks (one here) fed by 96 channels: 2 x 16 latent channels of control video
# plus the 64-channel mask, as model_base.WAN21_Vace builds them.
WAN21_VACE_LAYOUT = {
    **WAN21_LAYOUT,
    "vace_patch_embedding.weight": (WAN_WIDTH, 96, 1, 2, 2),
    **blocks("vace_blocks", 1),
}
# Wan 2.2 TI2V-5B: 48 latent channels in and out (Wan 2.2 VAE), by which ComfyUI knows it.
WAN22_LAYOUT = wan_layout(48)


def wan_stack(layout, expected_class, seed, vae_builder=tiny_wan21_vae):
    """The tiny Wan stack of `layout` (detected as `expected_class`): its model, the umt5 encoder and
    the VAE `vae_builder` draws."""
    model_config = detected_model_config(layout, WAN_SHRINK, expected_class)
    generator = torch.Generator().manual_seed(seed)
    model = diffusion_model(model_config, generator)
    clip = text_encoder(
        model_config.clip_target(), generator, {"umt5xxl_model_config": UMT5_TINY}, borrowed_spiece_model()
    )
    return model, clip, vae_builder(generator)


def tiny_wan21_t2v(seed: int = 0):
    """Wan 2.1 text-to-video: ComfyUI's WanModel, the umt5 encoder and a Wan 2.1 VAE."""
    return wan_stack(WAN21_LAYOUT, "WAN21_T2V", seed)


def tiny_wan21_vace(seed: int = 0):
    """Wan 2.1 VACE: ComfyUI's VaceWanModel, the umt5 encoder and a Wan 2.1 VAE."""
    return wan_stack(WAN21_VACE_LAYOUT, "WAN21_Vace", seed)


def tiny_wan22_t2v(seed: int = 0):
    """Wan 2.2 TI2V-5B: ComfyUI's WanModel on 48 channels, the umt5 encoder and a Wan 2.2 VAE."""
    return wan_stack(WAN22_LAYOUT, "WAN22_T2V", seed, tiny_wan22_vae)


# Wan's image-to-video models take 36 channels in: the 16-channel latent, the 4-channel mask and the
# 16-channel start-image latent that model_base.WAN21.concat_cond lays beside it, 144 values per 2x2
# patch. The tiny ones are 160 wide (2 heads of 80), so the patch embedding can keep the start image
# apart from the noisy latent (32 wide, it mixes them beyond recovery and a LoRA cannot learn to follow it).
WAN_I2V_WIDTH = 160
_WAN_I2V_IN = {"patch_embedding.weight": (WAN_I2V_WIDTH, 36, 1, 2, 2)}
# Wan 2.2 I2V A14B: detected as "t2v" (no CLIP-vision embedding), so ComfyUI loads it as WAN21_T2V.
WAN22_I2V_LAYOUT = {**wan_layout(16, WAN_I2V_WIDTH), **_WAN_I2V_IN}
# Wan 2.1 I2V: its CLIP-vision projection (img_emb, 1280 wide as detection builds it) makes it "i2v",
# loaded as WAN21_I2V.
WAN21_I2V_LAYOUT = {**WAN22_I2V_LAYOUT, "img_emb.proj.0.bias": (1280,)}


def tiny_wan21_i2v(seed: int = 0):
    """Wan 2.1 image-to-video: ComfyUI's WanModel (i2v), the umt5 encoder and a Wan 2.1 VAE."""
    return wan_stack(WAN21_I2V_LAYOUT, "WAN21_I2V", seed)


def tiny_wan22_i2v(seed: int = 0):
    """Wan 2.2 I2V A14B (one expert): ComfyUI's WanModel on 36 channels in, the umt5 encoder and a Wan 2.1 VAE."""
    return wan_stack(WAN22_I2V_LAYOUT, "WAN21_T2V", seed)


# Wan 2.1 Fun Control (model_detection: model_type "i2v", which the CLIP-vision projection
# img_emb.proj.0 marks, on 48 input channels): the 16-channel latent plus 32 channels of control
# video latent that model_base.WAN21.concat_cond fills with zeros when no control video is given.
# img_emb reads CLIP vision's 1280 (hard-coded by the class); without a CLIP-vision output the
# image cross-attention reads the text, as in ComfyUI with no clip_vision_output.
WAN21_FUN_CONTROL_LAYOUT = {
    **wan_layout(16),
    "patch_embedding.weight": (WAN_WIDTH, 48, 1, 2, 2),
    "img_emb.proj.0.bias": (1280,),
}


def tiny_wan21_fun_control(seed: int = 0):
    """Wan 2.1 Fun Control: ComfyUI's WanModel (i2v, 48 channels in), the umt5 encoder and a Wan 2.1 VAE."""
    return wan_stack(WAN21_FUN_CONTROL_LAYOUT, "WAN21_FunControl2V", seed)


# Wan 2.2 Animate (model_detection: model_type "animate", which face_adapter.fuser_blocks marks):
# ComfyUI's AnimateWanModel, an i2v WanModel on 36 input channels (the latent plus the 20 channels of
# reference-image latent and mask that model_base.WAN21.concat_cond fills with zeros without a
# reference), with pose and face inputs that it skips when absent (no pose_video_latent, no
# face_video_pixels). The class builds one face-fuser block per five blocks (real 40 blocks, 8
# fusers), so five blocks here keep one fuser and its LoRA keys. The motion and face encoders keep
# the widths the class hard-codes (512 and 1024).
WAN22_ANIMATE_LAYOUT = {
    **wan_layout(16),
    "patch_embedding.weight": (WAN_WIDTH, 36, 1, 2, 2),
    "face_adapter.fuser_blocks.0.k_norm.weight": (1,),
    **blocks("blocks", 5),
}


def tiny_wan22_animate(seed: int = 0):
    """Wan 2.2 Animate: ComfyUI's AnimateWanModel, the umt5 encoder and a Wan 2.1 VAE."""
    return wan_stack(WAN22_ANIMATE_LAYOUT, "WAN22_Animate", seed)


# Wan 2.2 S2V (model_detection: model_type "s2v", which the audio encoder's final_linear marks):
# ComfyUI's WanModel_S2V on the 16-channel latent. Its audio embedding, reference latent, reference
# motion and control video are inputs it skips when absent, as WanSoundImageToVideo leaves them
# without audio or images. The class builds its audio injectors for the real 40 blocks' indices
# whatever the block count (unused ones stay, so their LoRA keys are the real ones).
WAN22_S2V_LAYOUT = {**wan_layout(16), "casual_audio_encoder.encoder.final_linear.weight": (1,)}


def tiny_wan22_s2v(seed: int = 0):
    """Wan 2.2 S2V: ComfyUI's WanModel_S2V, the umt5 encoder and a Wan 2.1 VAE."""
    return wan_stack(WAN22_S2V_LAYOUT, "WAN22_S2V", seed)


FAMILIES = {
    "wan21_t2v": TinyFamily(
        tiny_wan21_t2v, family="Wan 2.1 text-to-video (and Wan 2.2 14B)", video_frames=VIDEO_FRAMES
    ),
    "wan21_vace": TinyFamily(tiny_wan21_vace, family="Wan 2.1 VACE", video_frames=VIDEO_FRAMES),
    "wan22_t2v": TinyFamily(tiny_wan22_t2v, family="Wan 2.2 TI2V 5B", video_frames=VIDEO_FRAMES),
    "wan21_i2v": TinyFamily(
        tiny_wan21_i2v, family="Wan 2.1 image-to-video", video_frames=VIDEO_FRAMES, start_image=True
    ),
    "wan22_i2v_14b": TinyFamily(
        tiny_wan22_i2v, family="Wan 2.2 image-to-video 14B", video_frames=VIDEO_FRAMES, start_image=True
    ),
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
}
