"""Tiny random-init stacks of the 2026 image classes that are variants of rows the suite already
builds (Chroma Radiance, Z-Image pixel space, Boogu, Lens) and of PixelDiT, built from ComfyUI's own
classes; see tiny_models.

Each diffusion-model config is what the host's model detection reads from a tiny state-dict layout
(detected_configs). The pixel-space classes (Chroma Radiance, Z-Image pixel space, PixelDiT) get the
"VAE" ComfyUI's own VAELoader gives them when "pixel_space" is picked: comfy.sd.VAE of a state dict
holding only "pixel_space_vae", which maps images in [0, 1] to 3-channel latents in [-1, 1] at 1x."""

import os

import comfy.sd
import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_dit import LLAMA_TINY, Z_IMAGE_SHRINK, _gemma_tokenizer_data
from devkit.tiny_flux import CHROMA_SHRINK, FLUX_WIDTH, LLAMA_TOKENIZER_DIR, T5XXL, taef2_vae
from devkit.tiny_image_2026 import vision_free_text_encoder
from devkit.tiny_models import TinyFamily
from eridiffusion.tiny_models import diffusion_model, init_weights, taesd_vae, text_encoder


def pixel_space_vae():
    """ComfyUI's pixel-space VAE, as nodes.VAELoader builds it for "pixel_space"."""
    return comfy.sd.VAE(sd={"pixel_space_vae": torch.tensor(1.0)})


# Chroma Radiance (model_detection's Chroma branch with NeRF blocks and no img_in): Chroma's 2 double
# + 2 single blocks, 64 wide, and its distilled guidance approximator shrunk as tiny_chroma's; the
# image enters through img_in_patch, a conv whose kernel side detection reads as the patch size (the
# real 16, so a 128 px image is 8x8 tokens) and a NeRF head decodes each patch's pixels from its
# token. Detection hard-codes the head: cut from 4 blocks of width 64 to 2 of 32 (the DCT features,
# nerf_max_freqs 8, stay real); the conv final head of current checkpoints (its norm key's presence).
# No "__x0__" key: the velocity-predicting form (x0 checkpoints load as the same class, their forward
# turning x0 into the velocity ComfyUI samples with).
RADIANCE_PATCH = 16
CHROMA_RADIANCE_LAYOUT = {
    "double_blocks.0.img_attn.norm.key_norm.scale": (FLUX_WIDTH // 2,),
    **blocks("double_blocks", 2),
    **blocks("single_blocks", 2),
    "img_in_patch.weight": (FLUX_WIDTH, 3, RADIANCE_PATCH, RADIANCE_PATCH),
    "txt_in.weight": (FLUX_WIDTH, T5XXL["d_model"]),
    "distilled_guidance_layer.norms.0.scale": (FLUX_WIDTH,),
    "nerf_blocks.0.norm.scale": (1,),
    "nerf_final_layer_conv.norm.scale": (1,),
}
CHROMA_RADIANCE_SHRINK = {**CHROMA_SHRINK, "nerf_hidden_size": 32, "nerf_depth": 2}


def unit_norm_scales(*modules):
    """Set the RMSNorm scales under `modules` to 1, near where trained checkpoints hold them.
    init_weights draws 1-D parameters around 0, which in the pixel decoders' chains of norms
    silences the output, and a short LoRA run cannot bring it back."""
    with torch.no_grad():
        for module in modules:
            for norm in module.modules():
                if not type(norm).__name__.endswith("RMSNorm"):
                    continue
                # torch's RMSNorm has `weight`; ComfyUI 0.3.75's Flux RMSNorm has `scale`
                scale = getattr(norm, "weight", None)
                scale = getattr(norm, "scale", None) if scale is None else scale
                if isinstance(scale, torch.nn.Parameter):
                    scale.fill_(1.0)


def tiny_chroma_radiance(seed: int = 0):
    """Chroma Radiance: ComfyUI's ChromaRadiance DiT (Chroma in pixel space with a NeRF patch
    decoder), Chroma's T5-XXL encoder, and ComfyUI's pixel-space VAE."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(CHROMA_RADIANCE_LAYOUT, CHROMA_RADIANCE_SHRINK, "ChromaRadiance")
    model = diffusion_model(config, generator)
    dit = model.model.diffusion_model
    # The NeRF head decodes through its norms into a 3x3 conv (not a linear layer: no adapter on it).
    unit_norm_scales(dit.nerf_blocks, dit.nerf_final_layer_conv)
    clip = text_encoder(config.clip_target(), generator, {"t5xxl_model_config": T5XXL})
    return model, clip, pixel_space_vae()


# Z-Image pixel space (model_detection's Z-Image branch with a dec_net decoder): detection knows
# Z-Image by its 3840-wide cap_embedder, so the layout carries that width; the rest of the layout
# gives the pixel decoder as detection reads it: the patch side from x_embedder (16 over RGB here,
# so a 128 px image is 8x8 tokens), a 64-wide MLP decoder (real: the model width) of 2 residual
# blocks with the 8x8 DCT features of the real one. The backbone is then cut as tiny_z_image's
# (256 wide, no lower: the modulation reads min(dim, 256) of the 256-wide timestep embedding).
Z_IMAGE_PIXEL_PATCH = 16
Z_IMAGE_PIXEL_DECODER = 64
_Z_IMAGE_PATCH_VALUES = Z_IMAGE_PIXEL_PATCH**2 * 3
Z_IMAGE_PIXEL_LAYOUT = {
    "noise_refiner.0.attention.k_norm.weight": (1,),
    **blocks("layers", 2),
    "cap_embedder.1.weight": (3840, LLAMA_TINY["hidden_size"]),
    "x_embedder.weight": (3840, _Z_IMAGE_PATCH_VALUES),
    "dec_net.cond_embed.weight": (Z_IMAGE_PIXEL_DECODER, 3840),
    "dec_net.final_layer.linear.weight": (_Z_IMAGE_PATCH_VALUES, Z_IMAGE_PIXEL_DECODER),
    "dec_net.input_embedder.embedder.0.weight": (Z_IMAGE_PIXEL_DECODER, _Z_IMAGE_PATCH_VALUES + 8**2),
    **blocks("dec_net.res_blocks", 2),
}


def tiny_z_image_pixel_space(seed: int = 0):
    """Z-Image pixel space: ComfyUI's NextDiTPixelSpace (Z-Image's backbone with a per-patch MLP
    pixel decoder, predicting x0), Z-Image's Qwen3-4B encoder, and ComfyUI's pixel-space VAE."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(Z_IMAGE_PIXEL_LAYOUT, Z_IMAGE_SHRINK, "ZImagePixelSpace")
    model = diffusion_model(config, generator)
    clip = text_encoder(config.clip_target(), generator, {"qwen3_4b_model_config": LLAMA_TINY})
    return model, clip, pixel_space_vae()


# Boogu-Image (model_detection "double_stream_layers.0.img_instruct_attn.processor.img_to_q.weight"):
# OmniGen2 with a dual-stream stage. Detection reads the width from x_embedder (48 here, real 3360
# over 16 latent channels x 2x2 patch), counts the single-stream, double-stream and refiner layers
# (2, 2, 2 here; real 32, 8, 2) and reads the instruction width from the caption embedder's norm
# (the tiny Qwen3-VL-8B width, real 4096); heads and rope are the model's defaults, cut as
# tiny_omnigen2's (two heads of 24 sharing one key/value head, three equal rope axes).
BOOGU_WIDTH = 48
BOOGU_LAYOUT = {
    "double_stream_layers.0.img_instruct_attn.processor.img_to_q.weight": (1,),
    "x_embedder.weight": (BOOGU_WIDTH, 16 * 2 * 2),
    "time_caption_embed.caption_embedder.0.weight": (LLAMA_TINY["hidden_size"],),
    **blocks("single_stream_layers", 2),
    **blocks("double_stream_layers", 2),
    **blocks("noise_refiner", 2),
}
BOOGU_SHRINK = {"num_attention_heads": 2, "num_kv_heads": 1, "axes_dim_rope": [8, 8, 8]}


def tiny_boogu(seed: int = 0):
    """Boogu-Image: ComfyUI's BooguTransformer2DModel, its Qwen3-VL-8B encoder (last hidden state;
    vision tower zeroed: it reads only image prompts) and a 16-channel TAESD (the real VAE is
    Flux's, as OmniGen2's)."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(BOOGU_LAYOUT, BOOGU_SHRINK, "Boogu")
    model = diffusion_model(config, generator)
    clip = vision_free_text_encoder(
        config.clip_target(),
        generator,
        {"qwen3vl_8b_model_config": LLAMA_TINY},
    )
    return model, clip, taesd_vae(16, config.latent_format, generator)


# Lens (model_detection: "transformer_blocks.0.attn.norm_added_q.weight" with SwiGLU "img_mlp.w1"):
# detection reads the channels from img_in and proj_out, the heads from img_in's width over the
# 64-wide heads, the layers, and the text width and the number of tapped encoder layers from the
# txt_norm list (4: GPT-OSS layers 5, 11, 17, 23). Tiny: 2 blocks (real 48), 64 wide in two heads of
# 32 with the real rope split halved (4:14:14 for 8:28:28), reading the 4 taps of a 32-wide encoder.
# Lens works on the FLUX.2 VAE's packed latents one token per latent pixel, with no patching of its
# own; ComfyUI's TAESD gives TAEF2's unpacked 32 channels at 8x, so the tiny model reads those (one
# token per 8x8 pixels instead of 16x16; see tiny_lens).
LENS_WIDTH = 64
LENS_TAPS = 4
LENS_ENCODER_WIDTH = 32
LENS_SHRINK = {"num_attention_heads": 2, "attention_head_dim": 32, "axes_dims_rope": [4, 14, 14]}
# GPT-OSS-20B cut to 32 wide with two heads of 16 (one key/value head) and 4 of its 32 experts (2
# active); its 24 layers stay, since the DiT reads layers 5, 11, 17 and 23.
GPT_OSS_TINY = {
    "hidden_size": LENS_ENCODER_WIDTH,
    "intermediate_size": 32,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
}


def lens_layout(channels):
    """Lens's detected layout over `channels` latent channels."""
    return {
        "transformer_blocks.0.attn.norm_added_q.weight": (1,),
        "transformer_blocks.0.img_mlp.w1.weight": (1,),
        **blocks("transformer_blocks", 2),
        "img_in.weight": (LENS_WIDTH, channels),
        "proj_out.weight": (channels, LENS_WIDTH),
        **{f"txt_norm.{i}.weight": (LENS_ENCODER_WIDTH,) for i in range(LENS_TAPS)},
    }


def lens_tokenizer_data():
    """The tokenizer a Lens encoder file carries ("tokenizer_json": GPT-OSS's o200k_harmony, which
    ComfyUI does not ship) replaced by the byte-level BPE of Llama 3 that it does: its 128256 ids
    all fit GPT-OSS's 201088-entry embedding. The Harmony chat template is then tokenized as text,
    so the 97 template tokens the encoder drops (txt_offset) are fewer than the template's 126 here
    and the features keep the template's last tokens before the prompt."""
    with open(os.path.join(LLAMA_TOKENIZER_DIR, "tokenizer.json"), "rb") as f:
        return {"tokenizer_json": f.read()}


def lens_text_encoder(clip_target, generator):
    """ComfyUI's CLIP for the Lens encoder, loaded from a random checkpoint. Its layers are ComfyUI's
    mixed-precision Linear and MoE expert banks, which hold no weight until a checkpoint is loaded
    (comfy.sd.CLIP moves the model before, so it must come with one): the checkpoint is the state of
    a twin of the encoder whose deferred weights are drawn (std 1/sqrt(fan_in), as init_weights)
    and loaded through those layers' own state-dict loading."""
    options = {"dtype": torch.float32, "gpt_oss_config": GPT_OSS_TINY}
    twin = clip_target.clip(device="cpu", dtype=torch.float32, model_options=options)
    init_weights(twin, generator)
    deferred = {}
    for name, layer in twin.named_modules():
        if hasattr(layer, "_orig_shape") and getattr(layer, "weight", None) is None:
            shape = layer._orig_shape  # (out, in), or (experts, out, in)
            deferred[f"{name}.weight"] = torch.empty(shape).normal_(0.0, shape[-1] ** -0.5, generator=generator)
    twin.load_state_dict(deferred, strict=False)
    return comfy.sd.CLIP(
        target=clip_target, model_options=options, tokenizer_data=lens_tokenizer_data(), state_dict=twin.state_dict()
    )


def tiny_lens(seed: int = 0):
    """Lens: ComfyUI's LensTransformer2DModel, its GPT-OSS-20B multi-layer encoder shrunk (through
    the "gpt_oss_config" option LensGptOssClipModel reads), and the real TAEF2, as Lens's latent
    space is FLUX.2's."""
    generator = torch.Generator().manual_seed(seed)
    vae = taef2_vae()
    channels = vae.latent_channels
    config = detected_model_config(lens_layout(channels), LENS_SHRINK, "Lens")
    config.latent_format.latent_channels = channels  # empty latents (sampling) in TAEF2's channels
    model = diffusion_model(config, generator)
    return model, lens_text_encoder(config.clip_target(), generator), vae


# PixelDiT text-to-image (model_detection: "core.pixel_embedder.proj.weight"): detection reads only
# that the key exists, so every size is the PixDiT_T2I default (1536 wide in 24 groups, 14 patch
# blocks over 16x16-pixel patches, 2 pixel blocks with 16-wide pixel tokens attending 1152 wide in
# 16 heads, 2304-wide Gemma-2 2B text). Tiny: 64 wide in two groups of 32, 2 patch blocks and one
# pixel block attending 32 wide in two heads; the 16x16 patches, 16-wide pixel tokens and the
# 300-token text position table stay real; the text width is the tiny Gemma-2's.
PIXELDIT_LAYOUT = {"core.pixel_embedder.proj.weight": (1,)}
PIXELDIT_SHRINK = {
    "hidden_size": 64,
    "num_groups": 2,
    "patch_depth": 2,
    "pixel_depth": 1,
    "pixel_attn_hidden_size": 32,
    "pixel_num_groups": 2,
    "txt_embed_dim": LLAMA_TINY["hidden_size"],
}


def tiny_pixeldit(seed: int = 0):
    """PixelDiT T2I: ComfyUI's PixDiT_T2I (an MMDiT over 16x16 patches whose pixel blocks decode each
    patch's pixels), its Gemma-2 2B encoder (with PixelDiT's prompt template; Gemma's tokenizer
    model borrowed as for Lumina 2) and ComfyUI's pixel-space VAE."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(PIXELDIT_LAYOUT, PIXELDIT_SHRINK, "PixelDiTT2I")
    model = diffusion_model(config, generator)
    dit = model.model.diffusion_model
    # The pixel tokens pass through the pixel blocks' and final layer's norms on their way out.
    unit_norm_scales(dit.pixel_blocks, dit.final_layer)
    clip = text_encoder(
        config.clip_target(), generator, {"gemma2_2b_model_config": LLAMA_TINY}, _gemma_tokenizer_data()
    )
    return model, clip, pixel_space_vae()


FAMILIES = {
    "chroma_radiance": TinyFamily(tiny_chroma_radiance, family="Chroma Radiance", steps=100, needs=("ChromaRadiance",)),
    "z_image_pixel_space": TinyFamily(
        tiny_z_image_pixel_space,
        family="Z-Image pixel space",
        steps=100,
        needs=("ZImagePixelSpace",),
        since="0.28.0",
    ),
    "boogu": TinyFamily(tiny_boogu, family="Boogu-Image", steps=100, needs=("Boogu",), since="0.28.0"),
    "lens": TinyFamily(tiny_lens, family="Lens", steps=100, needs=("Lens",), since="0.28.0"),
    "pixeldit": TinyFamily(tiny_pixeldit, family="PixelDiT", steps=100, needs=("PixelDiTT2I",), since="0.28.0"),
}
