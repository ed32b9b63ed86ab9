"""The tiny CogVideoX text-to-video stack (as CogVideoX-2b): ComfyUI's CogVideoX transformer, T5-XXL
and the CogVideoX VAE at small widths; see tiny_stack."""

import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_stack import T5_TINY, VIDEO_FRAMES, TinyFamily
from devkit.tiny_vaes import vae_of_layout
from eridiffusion.tiny_models import diffusion_model, init_weights, text_encoder

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
    return vae_of_layout(COGVIDEOX_VAE_LAYOUT, model)


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


FAMILIES = {
    "cogvideox_t2v": TinyFamily(
        tiny_cogvideox_t2v,
        family="CogVideoX text-to-video",
        video_frames=VIDEO_FRAMES,
        needs=("CogVideoX_T2V",),
        since="0.28.0",
    ),
}
