"""Tiny random-init stacks of the image families newer ComfyUI versions added (0.2x), built from
ComfyUI's own classes; see tiny_models. Each TinyFamily names the classes it needs, so on a host
without them its tests are skipped with that reason.

Each diffusion-model config is what the host's model detection reads from a tiny state-dict layout
(detected_configs); text encoders are the family's comfy.text_encoders classes shrunk through
"<name>_model_config" options, with the real vocabularies. Widths that ComfyUI itself uses to tell a
family from its neighbours, or that its classes hard-code, stay at their real size (said where)."""

import comfy.latent_formats
import comfy.sd1_clip
import torch
from transformers import PreTrainedTokenizerFast

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_dit import LLAMA_TINY, qwen_vl_text_encoder, wan21_vae
from devkit.tiny_flux import FLUX_SHRINK, FLUX_WIDTH, LLAMA_TOKENIZER_DIR, taef2_vae
from devkit.tiny_models import TinyFamily
from eridiffusion.tiny_models import CLIP_L, diffusion_model, taesd_vae, text_encoder

# Kandinsky 5.0 Image Lite (model_detection "visual_transformer_blocks.0.cross_attention.key_norm"):
# supported_models tells the image model from the video Kandinsky5 by model_dim 2560 with a 64-wide
# visual embedding (16 latent channels x 1x2x2 patch), so the width stays 2560, with detection's
# real heads of 128 (axes 32, 48, 48); 2 visual + 2 text blocks, a 64-wide feed-forward and time
# embedding. The text widths are not detected: they follow the tiny
# Qwen2.5-VL (in_text_dim) and CLIP-L pooled output (in_text_dim2).
KANDINSKY5_IMAGE_WIDTH = 2560
KANDINSKY5_HEAD = 128
KANDINSKY5_IMAGE_LAYOUT = {
    "visual_embeddings.in_layer.weight": (KANDINSKY5_IMAGE_WIDTH, 16 * 2 * 2),
    "visual_embeddings.in_layer.bias": (KANDINSKY5_IMAGE_WIDTH,),
    "time_embeddings.in_layer.bias": (64,),
    "visual_transformer_blocks.0.cross_attention.key_norm.weight": (KANDINSKY5_HEAD,),
    "visual_transformer_blocks.0.feed_forward.in_layer.weight": (64, KANDINSKY5_IMAGE_WIDTH),
    **blocks("visual_transformer_blocks", 2),
    **blocks("text_transformer_blocks", 2),
}
KANDINSKY5_IMAGE_SHRINK = {"in_text_dim": LLAMA_TINY["hidden_size"], "in_text_dim2": CLIP_L["hidden_size"]}


def tiny_kandinsky5_image(seed: int = 0):
    """Kandinsky 5.0 Image Lite: ComfyUI's Kandinsky5 DiT as Kandinsky5Image, its Qwen2.5-VL-7B +
    CLIP-L encoder, and a 16-channel TAESD (the real VAE is Flux's AutoencoderKL, whose encoder
    ComfyUI builds 128 wide whatever the checkpoint)."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(KANDINSKY5_IMAGE_LAYOUT, KANDINSKY5_IMAGE_SHRINK, "Kandinsky5Image")
    model = diffusion_model(config, generator)
    clip = qwen_vl_text_encoder(
        config.clip_target(), generator, {"qwen25_7b_model_config": LLAMA_TINY, "clip_l_model_config": CLIP_L}
    )
    return model, clip, taesd_vae(16, config.latent_format, generator)


# LongCat-Image (model_detection's Flux branch): ComfyUI tells it from FLUX.1 schnell only by its
# 3584-wide text input (Qwen2.5-VL-7B's hidden size) with no pooled vector, so txt_in and the
# encoder stay 3584 wide (its 152064 x 3584 embedding is most of the stack); the Flux blocks are
# tiny_flux's 2 double + 2 single, 64 wide.
LONGCAT_CONTEXT = 3584
LONGCAT_LAYOUT = {
    "double_blocks.0.img_attn.norm.key_norm.scale": (FLUX_WIDTH // 2,),
    **blocks("double_blocks", 2),
    **blocks("single_blocks", 2),
    "img_in.weight": (FLUX_WIDTH, 16 * 2 * 2),
    "txt_in.weight": (FLUX_WIDTH, LONGCAT_CONTEXT),
}


def tiny_longcat_image(seed: int = 0):
    """LongCat-Image: ComfyUI's Flux DiT as LongCatImage (text rope ids, no guidance), its
    Qwen2.5-VL-7B encoder (3 layers of one head, real width), and a 16-channel TAESD (the real VAE
    is Flux's)."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(LONGCAT_LAYOUT, FLUX_SHRINK, "LongCatImage")
    model = diffusion_model(config, generator)
    clip = qwen_vl_text_encoder(
        config.clip_target(), generator, {"qwen25_7b_model_config": {**LLAMA_TINY, "hidden_size": LONGCAT_CONTEXT}}
    )
    return model, clip, taesd_vae(16, config.latent_format, generator)


# ERNIE-Image: model_detection reads only that "layers.0.mlp.linear_fc2.weight" exists; every size
# is the ErnieImageModel default (4096 wide, 36 layers, 32 heads of 128 with rope axes 32/48/48).
# Tiny: 2 layers, 64 wide, two heads of 32 with the axes scaled alike; text_in_dim is the tiny
# Ministral-3 width; the channels and patch follow the VAE (see tiny_ernie_image).
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


class Llama3VocabMinistral3Tokenizer(comfy.sd1_clip.SDTokenizer):
    """The settings of the Mistral-3 tokenizer ErnieTokenizer uses (no end token, left padding, no
    minimum length, no weights) on the byte-level BPE vocabulary of Llama 3 that ComfyUI ships: the
    real one needs the 'tekken' vocabulary stored in the text-encoder file (and transformers 4.x's
    MistralConverter), as for FLUX.2 in tiny_flux."""

    def __init__(self, embedding_directory=None, tokenizer_data=None):
        super().__init__(
            LLAMA_TOKENIZER_DIR,
            embedding_directory=embedding_directory,
            pad_with_end=False,
            embedding_size=LLAMA_TINY["hidden_size"],
            embedding_key="ministral3_3b",
            tokenizer_class=PreTrainedTokenizerFast,
            has_end_token=False,
            pad_to_max_length=False,
            pad_token=128004,
            max_length=99999999,
            min_length=1,
            pad_left=True,
            disable_weights=True,
            tokenizer_data=tokenizer_data or {},
        )


def tiny_ernie_image(seed: int = 0):
    """ERNIE-Image: ComfyUI's ErnieImageModel, its Ministral-3 3B encoder (ErnieTokenizer given the
    Llama 3 vocabulary through the "<name>_tokenizer_class" option SD1Tokenizer reads), and the real
    TAEF2, as FLUX.2's latent space is ERNIE-Image's."""
    generator = torch.Generator().manual_seed(seed)
    vae = taef2_vae()
    # As for FLUX.2 (tiny_flux2): ComfyUI's TAESD gives TAEF2's 32 channels at 8x where the FLUX.2 VAE
    # packs each 2x2 patch into 128 channels at 16x; patch 2 over 32 channels is patch 1 over the packed
    # 128, with the same weights and keys.
    channels = vae.latent_channels
    patch = 2 if channels * 4 == comfy.latent_formats.Flux2.latent_channels else 1
    config = detected_model_config(
        ERNIE_LAYOUT,
        {**ERNIE_SHRINK, "in_channels": channels, "out_channels": channels, "patch_size": patch},
        "ErnieImage",
    )
    config.latent_format.latent_channels = channels  # empty latents (sampling) in TAEF2's channels
    model = diffusion_model(config, generator)
    clip = text_encoder(
        config.clip_target(),
        generator,
        {"ministral3_3b_model_config": {**LLAMA_TINY, "vocab_size": MINISTRAL3_VOCAB}},
        {"ministral3_3b_tokenizer_class": Llama3VocabMinistral3Tokenizer},
    )
    return model, clip, vae


# Anima (model_detection's Cosmos-Predict2 branch with an LLM adapter): MiniTrainDIT 64 wide
# (real 2048), 2 blocks of two heads. The LLM adapter is built at its fixed size whatever the
# config (6 layers, 1024 wide, reading 1024-wide Qwen3-0.6B states, writing the 1024-wide
# cross-attention context), so the Qwen3-0.6B encoder keeps its 1024 width (3 layers, one head).
ANIMA_WIDTH = 64
ANIMA_LAYOUT = {
    "blocks.0.mlp.layer1.weight": (1,),
    "llm_adapter.blocks.0.cross_attn.q_proj.weight": (1,),
    "x_embedder.proj.1.weight": (ANIMA_WIDTH, (16 + 1) * 2 * 2),
}  # 16 channels + padding mask
ANIMA_SHRINK = {"num_blocks": 2, "num_heads": 2, "adaln_lora_dim": 32}
QWEN3_06B_WIDTH = 1024


def tiny_anima(seed: int = 0):
    """Anima: ComfyUI's Anima DiT (MiniTrainDIT + LLM adapter), its Qwen3-0.6B encoder with the T5
    token ids the adapter reads, and its real VAE class, the Wan 2.1 (Qwen-Image) VAE, narrowed."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(ANIMA_LAYOUT, ANIMA_SHRINK, "Anima")
    model = diffusion_model(config, generator)
    clip = text_encoder(
        config.clip_target(), generator, {"qwen3_06b_model_config": {**LLAMA_TINY, "hidden_size": QWEN3_06B_WIDTH}}
    )
    return model, clip, wan21_vae(generator)


FAMILIES = {
    "kandinsky5_image": TinyFamily(
        tiny_kandinsky5_image, family="Kandinsky 5.0 Image Lite", steps=100, needs=("Kandinsky5Image",), since="0.28.0"
    ),
    "longcat_image": TinyFamily(
        tiny_longcat_image, family="LongCat-Image", steps=100, needs=("LongCatImage",), since="0.28.0"
    ),
    "ernie_image": TinyFamily(tiny_ernie_image, family="ERNIE-Image", steps=100, needs=("ErnieImage",), since="0.28.0"),
    "anima": TinyFamily(tiny_anima, family="Anima", steps=100, needs=("Anima",), since="0.28.0"),
}
