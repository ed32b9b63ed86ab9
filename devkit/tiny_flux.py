"""Tiny random-init Flux-family and SD3 stacks (Flux.1 dev/schnell/Kontext, Flux.2, Chroma, SD3.5)
built from ComfyUI's own classes; see tiny_models."""

import os

import comfy.latent_formats
import comfy.ldm.modules.diffusionmodules.mmdit
import comfy.sd
import comfy.sd1_clip
import comfy.supported_models_base
import comfy.text_encoders.flux
import comfy.text_encoders.sd3_clip
import torch
from transformers import PreTrainedTokenizerFast

from devkit.detected_configs import blocks, detected_model_config
from devkit.paths import taef2_weights
from devkit.tiny_models import TinyFamily
from eridiffusion.errors import EriDiffusionError
from eridiffusion.tiny_models import CLIP_G, CLIP_L, diffusion_model, taesd_vae, text_encoder

# T5-XXL keeps its real vocabulary (ComfyUI's T5 tokenizer feeds it) and shrinks the rest.
T5XXL = {"d_model": 32, "d_ff": 64, "num_heads": 2, "d_kv": 16, "num_layers": 2}

# SD3's text encoder pads the clip_l+clip_g states to 4096 and joins T5's tokens to them
# (sd3_clip.SD3ClipModel.encode_token_weights), so its T5 must be 4096 wide: one narrow layer.
SD3_T5XXL = {"d_model": 4096, "d_ff": 32, "num_heads": 1, "d_kv": 16, "num_layers": 1}
SD3_CONTEXT = 4096

# Flux.2's text encoder stacks the hidden states after layers 10, 20 and 30 of Mistral Small 3
# (flux.Mistral3_24BModel), so it keeps 30 layers, as ComfyUI's pruned FLUX.2 encoder does
# (model_options "num_layers": 30). The vocabulary is that of ComfyUI's llama_tokenizer (Llama 3's
# 128256 tokens and 3 added ones), which its tokenizer here gives.
LLAMA3_VOCAB = 128259
MISTRAL3 = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
    "vocab_size": LLAMA3_VOCAB,
}
MISTRAL3_LAYERS = 30
FLUX2_CONTEXT = 3 * MISTRAL3["hidden_size"]

# The state-dict layouts ComfyUI's model detection reads (detected_configs): 2 double + 2 single
# blocks, 64 wide; detection's full-size head count and rope axes are cut to 2 heads of 32.
FLUX_WIDTH = 64
_FLUX_BLOCKS = {
    "double_blocks.0.img_attn.norm.key_norm.scale": (FLUX_WIDTH // 2,),
    **blocks("double_blocks", 2),
    **blocks("single_blocks", 2),
}
FLUX_DEV_LAYOUT = {
    **_FLUX_BLOCKS,
    "img_in.weight": (FLUX_WIDTH, 16 * 2 * 2),
    "txt_in.weight": (FLUX_WIDTH, T5XXL["d_model"]),
    "vector_in.in_layer.weight": (FLUX_WIDTH, CLIP_L["hidden_size"]),
    "guidance_in.in_layer.weight": (FLUX_WIDTH, 256),
}
FLUX_SCHNELL_LAYOUT = {k: v for k, v in FLUX_DEV_LAYOUT.items() if not k.startswith("guidance_in.")}
FLUX_SHRINK = {"num_heads": 2, "axes_dim": [8, 12, 12]}
# Chroma patchifies inside the model (in_channels 64 = 16 x 2 x 2) and modulates from its
# distilled guidance approximator (here 2 layers of 64 instead of 5 of 5120) instead of a pooled
# text vector.
CHROMA_LAYOUT = {
    **_FLUX_BLOCKS,
    "img_in.weight": (FLUX_WIDTH, 64),
    "txt_in.weight": (FLUX_WIDTH, T5XXL["d_model"]),
    "distilled_guidance_layer.norms.0.scale": (FLUX_WIDTH,),
}
CHROMA_SHRINK = {**FLUX_SHRINK, "out_dim": FLUX_WIDTH, "hidden_dim": FLUX_WIDTH, "n_layers": 2}
# FLUX.2 [dev]: global modulation, SiLU-gated MLPs, no biases, 4 rope axes, guidance distilled.
FLUX2_LAYOUT = {
    **_FLUX_BLOCKS,
    "double_stream_modulation_img.lin.weight": (6 * FLUX_WIDTH, FLUX_WIDTH),
    "img_in.weight": (FLUX_WIDTH, 128),
    "txt_in.weight": (FLUX_WIDTH, FLUX2_CONTEXT),
    "guidance_in.in_layer.weight": (FLUX_WIDTH, 256),
}
FLUX2_SHRINK = {"num_heads": 2, "axes_dim": [8, 8, 8, 8]}

# SD3.5 Medium as model detection reads it: MMDiT is 64 wide per block (x_embedder), here 2 blocks
# (real 24) so 128 wide in 2 heads of 64; rms qk-norm and self-attention in the first x block (the
# keys' presence); pos_embed cropped from a 32x32 patch grid (512 px; real 384x384); the y and
# context embedders read the clip_l + clip_g pooled width and the 4096-wide clip+T5 states.
SD3_DEPTH = 2
SD3_WIDTH = 64 * SD3_DEPTH
SD3_POS_EMBED_MAX = 32
SD3_LAYOUT = {
    "x_embedder.proj.weight": (SD3_WIDTH, 16, 2, 2),
    "final_layer.linear.weight": (16 * 2 * 2, SD3_WIDTH),
    "y_embedder.mlp.0.weight": (SD3_WIDTH, CLIP_L["hidden_size"] + CLIP_G["hidden_size"]),
    "context_embedder.weight": (SD3_WIDTH, SD3_CONTEXT),
    "pos_embed": (1, SD3_POS_EMBED_MAX**2, SD3_WIDTH),
    "joint_blocks.0.context_block.attn.qkv.weight": (3 * SD3_WIDTH, SD3_WIDTH),
    "joint_blocks.0.context_block.attn.ln_q.weight": (64,),
    "joint_blocks.0.x_block.attn2.qkv.weight": (3 * SD3_WIDTH, SD3_WIDTH),
}

LLAMA_TOKENIZER_DIR = os.path.join(os.path.dirname(comfy.text_encoders.flux.__file__), "llama_tokenizer")


def _checkpoint_with(*encoder_keys):
    """A stand-in state dict holding just the keys by which a model config's clip_target() sees
    which text encoders a checkpoint carries (the values only give their dtype)."""
    return {f"text_encoders.{key}": torch.empty(0, dtype=torch.float32) for key in encoder_keys}


def tiny_sd3(seed: int = 0):
    """SD3.5 (Medium layout): ComfyUI's SD3 MMDiT, clip_l + clip_g + t5xxl, a 16-channel TAESD."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(SD3_LAYOUT, None, "SD3")
    model = diffusion_model(config, generator)
    # pos_embed is a buffer the checkpoint fills with a 2-D sin-cos table; build that table here
    dit = model.model.diffusion_model
    table = comfy.ldm.modules.diffusionmodules.mmdit.get_2d_sincos_pos_embed_torch(
        dit.hidden_size, SD3_POS_EMBED_MAX, SD3_POS_EMBED_MAX
    )
    dit.pos_embed.copy_(table.reshape(dit.pos_embed.shape))
    target = config.clip_target(
        _checkpoint_with(
            "clip_l.transformer.text_model.final_layer_norm.weight",
            "clip_g.transformer.text_model.final_layer_norm.weight",
            "t5xxl.transformer.encoder.final_layer_norm.weight",
        )
    )
    clip = text_encoder(
        target,
        generator,
        {"clip_l_model_config": CLIP_L, "clip_g_model_config": CLIP_G, "t5xxl_model_config": SD3_T5XXL},
    )
    return model, clip, taesd_vae(16, config.latent_format, generator)


def _flux1(model_config, seed):
    generator = torch.Generator().manual_seed(seed)
    model = diffusion_model(model_config, generator)
    clip = text_encoder(
        model_config.clip_target(), generator, {"clip_l_model_config": CLIP_L, "t5xxl_model_config": T5XXL}
    )
    return model, clip, taesd_vae(16, model_config.latent_format, generator)


def tiny_flux_dev(seed: int = 0):
    """FLUX.1 [dev] (also how Kontext loads): ComfyUI's Flux with guidance embedding, clip_l + t5xxl."""
    return _flux1(detected_model_config(FLUX_DEV_LAYOUT, FLUX_SHRINK, "Flux"), seed)


def tiny_flux_schnell(seed: int = 0):
    """FLUX.1 [schnell]: ComfyUI's FluxSchnell (no guidance embedding, shift 1), clip_l + t5xxl."""
    return _flux1(detected_model_config(FLUX_SCHNELL_LAYOUT, FLUX_SHRINK, "FluxSchnell"), seed)


def tiny_chroma(seed: int = 0):
    """Chroma: ComfyUI's Chroma DiT and its PixArt-style t5xxl text encoder, a 16-channel TAESD."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(CHROMA_LAYOUT, CHROMA_SHRINK, "Chroma")
    model = diffusion_model(config, generator)
    clip = text_encoder(config.clip_target(), generator, {"t5xxl_model_config": T5XXL})
    return model, clip, taesd_vae(16, config.latent_format, generator)


class Llama3VocabMistral3Tokenizer(comfy.sd1_clip.SDTokenizer):
    """flux.Mistral3Tokenizer's settings (no end token, left padding, no minimum length) on the
    byte-level BPE vocabulary of Llama 3 that ComfyUI ships. The real one needs the 'tekken'
    vocabulary stored in the FLUX.2 text-encoder file and the MistralConverter API of
    transformers 4.x (5.x changed it), neither of which a test machine has."""

    def __init__(self, embedding_directory=None, tokenizer_data=None):
        # PreTrainedTokenizerFast reads tokenizer.json as it is; transformers 5's LlamaTokenizerFast
        # rebuilds its pre-tokenizer and drops the spaces ("a photo" -> "aph", "oto").
        super().__init__(
            LLAMA_TOKENIZER_DIR,
            embedding_directory=embedding_directory,
            pad_with_end=False,
            embedding_size=MISTRAL3["hidden_size"],
            embedding_key="mistral3_24b",
            tokenizer_class=PreTrainedTokenizerFast,
            has_end_token=False,
            pad_to_max_length=False,
            pad_token=128004,
            max_length=99999999,
            min_length=1,
            pad_left=True,
            tokenizer_data=tokenizer_data or {},
        )


class Flux2Tokenizer(comfy.text_encoders.flux.Flux2Tokenizer):
    """ComfyUI's Flux2Tokenizer (its system-prompt template included), given the Llama 3 vocabulary
    through the "<name>_tokenizer_class" option SD1Tokenizer reads from tokenizer_data."""

    def __init__(self, embedding_directory=None, tokenizer_data=None):
        vocabulary = {"mistral3_24b_tokenizer_class": Llama3VocabMistral3Tokenizer}
        super().__init__(
            embedding_directory=embedding_directory, tokenizer_data={**(tokenizer_data or {}), **vocabulary}
        )


def taef2_vae():
    """The real TAEF2 (FLUX.2 latent space), as ComfyUI's VAE loads it."""
    sd = {}
    for part in ("encoder", "decoder"):
        path = os.path.join(taef2_weights(), f"taef2_{part}.pth")
        if not os.path.exists(path):
            raise EriDiffusionError(f"{path} is missing: the flux2 tiny stack needs the TAEF2 weights there.")
        sd.update({f"taesd_{part}.{k}": v for k, v in torch.load(path, weights_only=True).items()})
    return comfy.sd.VAE(sd=sd)


def tiny_flux2(seed: int = 0):
    """FLUX.2 [dev]: ComfyUI's Flux2 DiT, its Mistral-3 text encoder (Flux2TEModel) shrunk, the
    real TAEF2 VAE."""
    generator = torch.Generator().manual_seed(seed)
    vae = taef2_vae()
    # ComfyUI 0.3.75's TAESD gives TAEF2's 32 channels at 8x; the FLUX.2 VAE (and newer ComfyUI's
    # TAESD) packs each 2x2 patch into 128 channels at 16x. The model patchifies what it gets:
    # patch 2 over 32 channels is patch 1 over the packed 128, with the same weights and keys.
    channels = vae.latent_channels
    patch = 2 if channels * 4 == comfy.latent_formats.Flux2.latent_channels else 1
    config = detected_model_config(
        FLUX2_LAYOUT, {**FLUX2_SHRINK, "in_channels": channels, "out_channels": channels, "patch_size": patch}, "Flux2"
    )
    if config.latent_format.latent_channels != channels:
        # so empty latents (fix_empty_latent_channels, the sampler) are made in TAEF2's 32 channels
        config.latent_format.latent_channels = channels
    model = diffusion_model(config, generator)
    te = comfy.text_encoders.flux.flux2_te()
    target = comfy.supported_models_base.ClipTarget(Flux2Tokenizer, te)
    clip = text_encoder(target, generator, {"num_layers": MISTRAL3_LAYERS, "mistral3_24b_model_config": MISTRAL3})
    return model, clip, vae


FAMILIES = {
    "sd3": TinyFamily(
        tiny_sd3, family="SD3 / SD3.5 (Medium, Large, Large Turbo)", steps=100, learning_rate=3e-3, resolution=128
    ),
    "flux_dev": TinyFamily(
        tiny_flux_dev, family="Flux.1 dev (and Flex-style variants)", steps=100, learning_rate=3e-3, resolution=128
    ),
    "flux_schnell": TinyFamily(
        tiny_flux_schnell, family="Flux.1 schnell", steps=100, learning_rate=3e-3, resolution=128
    ),
    "flux_kontext": TinyFamily(
        tiny_flux_dev, family="Flux.1 Kontext (edit pairs)", steps=100, learning_rate=3e-3, resolution=128
    ),
    "chroma": TinyFamily(tiny_chroma, family="Chroma", steps=100, learning_rate=3e-3, resolution=128),
    "flux2": TinyFamily(tiny_flux2, family="Flux.2", steps=100, learning_rate=3e-3, resolution=128),
}
