"""The tiny FLUX.2 stacks on the real TAEF2: FLUX.2 [dev] (ComfyUI's Flux2 DiT, its Mistral-3 text
encoder on Llama 3's vocabulary) and FLUX.2 [klein] 4B and 9B as ComfyUI 0.28 builds them (no
guidance embedding; three stacked Qwen3 hidden states as text, the Qwen3 encoder the host's own
Flux2.clip_target picks from the checkpoint's text-encoder keys, the real Qwen tokenizer); see
tiny_stack."""

import comfy.supported_models_base
import comfy.text_encoders.flux
import torch

from devkit.detected_configs import detected_model_config
from devkit.tiny_flux import FLUX_BLOCKS, FLUX_WIDTH
from devkit.tiny_stack import LLAMA3_VOCAB, LLAMA_TINY, Llama3VocabMistralTokenizer, TinyFamily
from devkit.tiny_vaes import taef2_patching, taef2_vae
from eridiffusion.tiny_models import diffusion_model, text_encoder

# Flux.2's text encoder stacks the hidden states after layers 10, 20 and 30 of Mistral Small 3
# (flux.Mistral3_24BModel), so it keeps 30 layers, as ComfyUI's pruned FLUX.2 encoder does
# (model_options "num_layers": 30). The vocabulary is that of ComfyUI's llama_tokenizer, which its
# tokenizer here gives.
MISTRAL3 = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
    "vocab_size": LLAMA3_VOCAB,
}
MISTRAL3_LAYERS = 30
FLUX2_CONTEXT = 3 * MISTRAL3["hidden_size"]

# FLUX.2 [dev]: global modulation, SiLU-gated MLPs, no biases, 4 rope axes, guidance distilled.
FLUX2_LAYOUT = {
    **FLUX_BLOCKS,
    "double_stream_modulation_img.lin.weight": (6 * FLUX_WIDTH, FLUX_WIDTH),
    "img_in.weight": (FLUX_WIDTH, 128),
    "txt_in.weight": (FLUX_WIDTH, FLUX2_CONTEXT),
    "guidance_in.in_layer.weight": (FLUX_WIDTH, 256),
}
FLUX2_SHRINK = {"num_heads": 2, "axes_dim": [8, 8, 8, 8]}


class Llama3VocabMistral3Tokenizer(Llama3VocabMistralTokenizer):
    """flux.Mistral3Tokenizer's settings on Llama 3's vocabulary (see Llama3VocabMistralTokenizer)."""

    EMBEDDING_KEY = "mistral3_24b"


class Flux2Tokenizer(comfy.text_encoders.flux.Flux2Tokenizer):
    """ComfyUI's Flux2Tokenizer (its system-prompt template included), given the Llama 3 vocabulary
    through the "<name>_tokenizer_class" option SD1Tokenizer reads from tokenizer_data."""

    def __init__(self, embedding_directory=None, tokenizer_data=None):
        vocabulary = {"mistral3_24b_tokenizer_class": Llama3VocabMistral3Tokenizer}
        super().__init__(
            embedding_directory=embedding_directory, tokenizer_data={**(tokenizer_data or {}), **vocabulary}
        )


def flux2_model(layout, generator, vae):
    """ComfyUI's Flux2 DiT of `layout` over TAEF2 `vae`'s latents (taef2_patching), its empty latents
    (fix_empty_latent_channels, the sampler) made in TAEF2's channels."""
    config = detected_model_config(layout, {**FLUX2_SHRINK, **taef2_patching(vae)}, "Flux2")
    config.latent_format.latent_channels = vae.latent_channels
    return config, diffusion_model(config, generator)


def tiny_flux2(seed: int = 0):
    """FLUX.2 [dev]: ComfyUI's Flux2 DiT, its Mistral-3 text encoder (Flux2TEModel) shrunk, the
    real TAEF2 VAE."""
    generator = torch.Generator().manual_seed(seed)
    vae = taef2_vae()
    _, model = flux2_model(FLUX2_LAYOUT, generator, vae)
    target = comfy.supported_models_base.ClipTarget(Flux2Tokenizer, comfy.text_encoders.flux.flux2_te())
    clip = text_encoder(target, generator, {"num_layers": MISTRAL3_LAYERS, "mistral3_24b_model_config": MISTRAL3})
    return model, clip, vae


# Qwen3 as klein_te reads it: the hidden states after layers 9, 18 and 27 are stacked (Qwen3_4BModel's
# layer=[9, 18, 27]), so 28 layers are kept, each 32 wide; the real 151936-token vocabulary. (Its
# config fixes the head width at 128: one query head and one key/value head.)
QWEN3_TINY = {**LLAMA_TINY, "num_hidden_layers": 28}
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
    config, model = flux2_model(KLEIN_LAYOUT, generator, vae)
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
    "flux2": TinyFamily(tiny_flux2, family="Flux.2", steps=100, learning_rate=3e-3, resolution=128),
    "flux2_klein_4b": TinyFamily(
        tiny_flux2_klein_4b, family="Flux.2-klein 4B", steps=100, resolution=128, needs_te=("klein_te",), since="0.28.0"
    ),
    "flux2_klein_9b": TinyFamily(
        tiny_flux2_klein_9b, family="Flux.2-klein 9B", steps=100, resolution=128, needs_te=("klein_te",), since="0.28.0"
    ),
}
