"""Tiny FLUX.2 [klein] stacks (4B and 9B) as ComfyUI 0.28 builds them: the Flux2 DiT with no
guidance embedding, whose text input is three stacked Qwen3 hidden states, and the Qwen3 text
encoder that the host's own Flux2.clip_target picks from the checkpoint's text-encoder keys
(qwen3_4b: KleinTokenizer + klein_te's Qwen3-4B; qwen3_8b: KleinTokenizer8B + Qwen3-8B), with the
real Qwen tokenizer and the TAEF2 VAE."""

import torch

from devkit.detected_configs import detected_model_config
from devkit.tiny_flux import FLUX2_LAYOUT, FLUX2_SHRINK, FLUX_WIDTH, taef2_vae
from devkit.tiny_models import TinyFamily
from eridiffusion.tiny_models import diffusion_model, text_encoder

# Qwen3 as klein_te reads it: the hidden states after layers 9, 18 and 27 are stacked (Qwen3_4BModel's
# layer=[9, 18, 27]), so 28 layers are kept, each 32 wide; the real 151936-token vocabulary. (Its
# config fixes the head width at 128: one query head and one key/value head.)
QWEN3_TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 28,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
}
KLEIN_CONTEXT = 3 * QWEN3_TINY["hidden_size"]
# klein's DiT as detection reads it: FLUX.2's layout without guidance_in (klein embeds no guidance)
# and with txt_in reading the stacked Qwen3 states.
KLEIN_LAYOUT = {
    **{k: v for k, v in FLUX2_LAYOUT.items() if not k.startswith("guidance_in")},
    "txt_in.weight": (FLUX_WIDTH, KLEIN_CONTEXT),
}


def _klein(text_model, seed):
    """The tiny klein stack whose text encoder the host picks for a checkpoint holding `text_model`
    (qwen3_4b or qwen3_8b) weights."""
    generator = torch.Generator().manual_seed(seed)
    vae = taef2_vae()
    channels = vae.latent_channels
    patch = 2 if channels * 4 == 128 else 1  # as tiny_flux2: TAEF2's packing on this host
    config = detected_model_config(
        KLEIN_LAYOUT, {**FLUX2_SHRINK, "in_channels": channels, "out_channels": channels, "patch_size": patch}, "Flux2"
    )
    if config.latent_format.latent_channels != channels:
        config.latent_format.latent_channels = channels
    model = diffusion_model(config, generator)
    norm = f"{config.text_encoder_key_prefix[0]}{text_model}.transformer.model.norm.weight"
    target = config.clip_target({norm: torch.zeros(QWEN3_TINY["hidden_size"], dtype=torch.float32)})
    clip = text_encoder(target, generator, {f"{text_model}_model_config": QWEN3_TINY})
    return model, clip, vae


def tiny_flux2_klein_4b(seed: int = 0):
    """FLUX.2 [klein] 4B: the Flux2 DiT and the Qwen3-4B encoder (klein_te, KleinTokenizer)."""
    return _klein("qwen3_4b", seed)


def tiny_flux2_klein_9b(seed: int = 0):
    """FLUX.2 [klein] 9B: the Flux2 DiT and the Qwen3-8B encoder (klein_te, KleinTokenizer8B)."""
    return _klein("qwen3_8b", seed)


FAMILIES = {
    "flux2_klein_4b": TinyFamily(
        tiny_flux2_klein_4b, family="Flux.2-klein 4B", steps=100, resolution=128, needs_te=("klein_te",), since="0.28.0"
    ),
    "flux2_klein_9b": TinyFamily(
        tiny_flux2_klein_9b, family="Flux.2-klein 9B", steps=100, resolution=128, needs_te=("klein_te",), since="0.28.0"
    ),
}
