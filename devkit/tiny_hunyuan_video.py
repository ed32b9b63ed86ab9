"""The tiny HunyuanVideo stacks: HunyuanVideo 1.0 (its Llama 3 + clip_l encoders), 1.5 and 1.5
image-to-video (Qwen2.5-VL + byT5), each ComfyUI's HunyuanVideo DiT as detection reads it with the
family's own VAE class at small widths; see tiny_stack."""

import comfy.ldm.hunyuan_video.vae_refiner
import comfy.ops
import comfy.sd
import comfy.text_encoders.qwen_vl
import torch
from comfy.ldm.models.autoencoder import AutoencoderKL, AutoencodingEngine

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_stack import LLAMA_TINY_4_LAYERS, VIDEO_FRAMES, TinyFamily
from devkit.tiny_vaes import gammas_to_one, vae_of_layout
from eridiffusion.tiny_models import CLIP_L, diffusion_model, init_weights, text_encoder

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
    return vae_of_layout(HUNYUAN_VIDEO_VAE_LAYOUT, model)


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
    gammas_to_one(model)
    return vae_of_layout(HUNYUAN_VIDEO15_VAE_LAYOUT, model)


# HunyuanVideo 1.0 (model_detection: "txt_in.individual_token_refiner..." with 3D patches): as
# detected, 1 double + 1 single block of width 32 (real: 20 + 40 of 3072), 16 latent channels at
# 1x2x2 patches, guidance-distilled (guidance_in), the Llama hidden states as text (txt_in).
# Detection takes 128-wide heads with the real head's rope axes [16, 56, 56], and clip_l's 768 for
# any vector_in: cut to 2 heads of 16 with axes summing to that, and the tiny clip_l's pooled width.
HUNYUAN_VIDEO_WIDTH = 32
_HUNYUAN_VIDEO_BLOCKS = {
    "txt_in.individual_token_refiner.blocks.0.norm1.weight": (HUNYUAN_VIDEO_WIDTH,),
    "txt_in.input_embedder.weight": (HUNYUAN_VIDEO_WIDTH, LLAMA_TINY_4_LAYERS["hidden_size"]),
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
        model_config.clip_target(),
        generator,
        {"clip_l_model_config": CLIP_L, "llama_model_config": LLAMA_TINY_4_LAYERS},
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


def text_encoder_with_a_tiny_vision_tower(clip_target, generator, model_options):
    """text_encoder() for an encoder with Qwen2.5-VL inside: its vision tower is built at
    the real size (hidden 1280, 32 layers, uninitialised memory) whatever the model options say. It
    only reads images, so a one-layer instance of the same class replaces it before the weights are
    drawn."""
    clip = comfy.sd.CLIP(target=clip_target, model_options={"dtype": torch.float32, **model_options})
    transformer = clip.cond_stage_model.qwen25_7b.transformer
    transformer.visual = comfy.text_encoders.qwen_vl.Qwen2VLVisionTransformer(
        hidden_size=32,
        output_hidden_size=LLAMA_TINY_4_LAYERS["hidden_size"],
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
    clip = text_encoder_with_a_tiny_vision_tower(
        model_config.clip_target(),
        generator,
        {"qwen25_7b_model_config": LLAMA_TINY_4_LAYERS, "_model_config": BYT5_TINY},
    )
    return model, clip, tiny_hunyuan_video15_vae(generator)


FAMILIES = {
    "hunyuan_video": TinyFamily(tiny_hunyuan_video, family="HunyuanVideo", video_frames=VIDEO_FRAMES),
    "hunyuan_video15": TinyFamily(tiny_hunyuan_video15, family="HunyuanVideo 1.5", video_frames=VIDEO_FRAMES),
    "hunyuan_video15_i2v": TinyFamily(
        tiny_hunyuan_video15,
        family="HunyuanVideo 1.5 image-to-video",
        video_frames=VIDEO_FRAMES,
        start_image=True,
    ),
}
