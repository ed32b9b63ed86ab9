"""The tiny ERNIE-Image stack: ComfyUI's ErnieImageModel, its Ministral-3 3B encoder on Llama 3's
vocabulary, and the real TAEF2, as FLUX.2's latent space is ERNIE-Image's; see tiny_stack."""

import torch

from devkit.detected_configs import detected_model_config
from devkit.tiny_stack import LLAMA_TINY, Llama3VocabMistralTokenizer, TinyFamily
from devkit.tiny_vaes import taef2_patching, taef2_vae
from eridiffusion.tiny_models import diffusion_model, text_encoder

# ERNIE-Image: model_detection reads only that "layers.0.mlp.linear_fc2.weight" exists; every size
# is the ErnieImageModel default (4096 wide, 36 layers, 32 heads of 128 with rope axes 32/48/48).
# Tiny: 2 layers, 64 wide, two heads of 32 with the axes scaled alike; text_in_dim is the tiny
# Ministral-3 width; the channels and patch follow the VAE (tiny_vaes.taef2_patching).
ERNIE_LAYOUT = {"layers.0.mlp.linear_fc2.weight": (1,)}
ERNIE_SHRINK = {
    "hidden_size": 64,
    "num_attention_heads": 2,
    "num_layers": 2,
    "ffn_hidden_size": 128,
    "text_in_dim": LLAMA_TINY["hidden_size"],
    "rope_axes_dim": (8, 12, 12),
}
MINISTRAL3_VOCAB = 131072  # Ministral3_3BConfig.vocab_size; the Llama 3 ids below all fit in it


class Llama3VocabMinistral3Tokenizer(Llama3VocabMistralTokenizer):
    """The settings of the Mistral-3 tokenizer ErnieTokenizer uses (no weights either) on Llama 3's
    vocabulary (see Llama3VocabMistralTokenizer)."""

    EMBEDDING_KEY = "ministral3_3b"
    OPTIONS = {"disable_weights": True}


def tiny_ernie_image(seed: int = 0):
    """ERNIE-Image: ComfyUI's ErnieImageModel, its Ministral-3 3B encoder (ErnieTokenizer given the
    Llama 3 vocabulary through the "<name>_tokenizer_class" option SD1Tokenizer reads), and the real
    TAEF2, as FLUX.2's latent space is ERNIE-Image's."""
    generator = torch.Generator().manual_seed(seed)
    vae = taef2_vae()
    config = detected_model_config(ERNIE_LAYOUT, {**ERNIE_SHRINK, **taef2_patching(vae)}, "ErnieImage")
    config.latent_format.latent_channels = vae.latent_channels  # empty latents (sampling) in TAEF2's channels
    model = diffusion_model(config, generator)
    clip = text_encoder(
        config.clip_target(),
        generator,
        {"ministral3_3b_model_config": {**LLAMA_TINY, "vocab_size": MINISTRAL3_VOCAB}},
        {"ministral3_3b_tokenizer_class": Llama3VocabMinistral3Tokenizer},
    )
    return model, clip, vae


FAMILIES = {
    "ernie_image": TinyFamily(tiny_ernie_image, family="ERNIE-Image", steps=100, needs=("ErnieImage",), since="0.28.0"),
}
