"""What every tiny family module (devkit/tiny_<family>.py) builds on: the TinyFamily record, the tiny
text-encoder sizes, and the pieces a stack is assembled from (ComfyUI's model on a detected config,
its text encoders with vision towers zeroed, borrowed tokenizer models, a TAESD). Import once ComfyUI
is on sys.path.

Each diffusion model's config is what the installed ComfyUI's model detection reads from a few
state-dict keys of the family at tiny shapes (detected_configs), with the sizes detection hard-codes
for the full-size model cut down, so block names (and LoRA keys) are the real ones. Text encoders are
the family's own comfy.text_encoders classes, shrunk through "<name>_model_config" model options;
vocabularies stay real because ComfyUI's shipped tokenizers feed them."""

import os
from collections.abc import Callable
from dataclasses import dataclass

import comfy.sd
import comfy.sd1_clip
import comfy.text_encoders.aura_t5
import comfy.text_encoders.flux
import comfy.text_encoders.qwen_vl
import torch
from transformers import PreTrainedTokenizerFast

from devkit.detected_configs import detected_model_config
from eridiffusion.tiny_models import diffusion_model, init_weights, taesd_vae, text_encoder


@dataclass(frozen=True)
class TinyFamily:
    """How to build one family's tiny stack, and the short run that shows it learns."""

    build: Callable  # seed -> (ModelPatcher, CLIP, VAE)
    family: str  # the row of eridiffusion.training.model.families.FAMILIES this stack proves
    steps: int = 200
    learning_rate: float = 3e-3
    resolution: int = 128  # training and sampling size in pixels
    video_frames: int = 0  # > 0: a video model, trained on clips of this many frames
    audio_seconds: float = 0.0  # > 0: an audio model, trained on (and sampling) clips of this many seconds
    start_image: bool = False  # an image-to-video model: trained with CacheLatents' start_image on
    sample_size: tuple = (96, 64)  # width, height of the test renders: not square, so a swapped axis shows
    needs: tuple = ()  # comfy.supported_models classes the stack is built from, where older
    # ComfyUI versions lack them
    since: str = "0.3.75"  # the first tested ComfyUI host that has them (tiny_models.TESTED_HOSTS)
    needs_te: tuple = ()  # comfy.text_encoders.flux builders the stack's text encoder needs (klein_te)
    inpaint: bool = False  # an inpainting model: its data is cached with CacheLatents' inpaint

    def missing_on_host(self):
        """The classes of `needs` (and text encoders of `needs_te`) this ComfyUI lacks (its tests are
        skipped there, with that reason)."""
        import comfy.supported_models

        missing = [f"{name} model class" for name in self.needs if not hasattr(comfy.supported_models, name)]
        te = [f"{name} text encoder" for name in self.needs_te if not hasattr(comfy.text_encoders.flux, name)]
        return missing + te


# Llama-style encoders (llama.py configs): head_dim is a class constant of each config (128, Gemma2
# 256), so only the head counts, widths and depths shrink. Three layers: Gemma2 and Qwen3 read the
# penultimate one (layer_idx=-2) and SDClipModel asserts abs(layer_idx) < num_layers.
LLAMA_TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
}
# Four layers where an encoder reads hidden layer -3 (HunyuanVideo's Llama and Qwen2.5-VL,
# HunyuanImage 2.1's Qwen2.5-VL); Kandinsky 5 Video's and ACE-Step's encoders are built alike.
LLAMA_TINY_4_LAYERS = {**LLAMA_TINY, "num_hidden_layers": 4}
# T5 encoders (t5_config_*.json: t5xxl, pile-T5): the real 32128 vocabulary, two narrow blocks.
T5_TINY = {"d_model": 32, "d_kv": 16, "num_heads": 2, "d_ff": 64, "num_layers": 2}

VIDEO_FRAMES = 9  # 4k+1 and 8k+1: one clip length every video family's VAE accepts


def taesd_stack(model_config, clip_target, te_options, latent_channels, seed, tokenizer_data=None):
    """(ModelPatcher, CLIP, VAE) of `model_config`: ComfyUI's diffusion model, the text encoder of
    `clip_target` shrunk by `te_options`, and a random TAESD of `latent_channels`, all drawn from one
    generator seeded with `seed`."""
    generator = torch.Generator().manual_seed(seed)
    model = diffusion_model(model_config, generator)
    clip = text_encoder(clip_target, generator, te_options, tokenizer_data)
    vae = taesd_vae(latent_channels, model_config.latent_format, generator)
    return model, clip, vae


def detected_at_full_width(layout, shrink, expected_class):
    """detected_model_config for a family whose supported_models class ComfyUI picks by a full-size
    width (Z-Image's 3840, AuraFlow's 2048-wide pile-T5 input): the layout carries that width so the
    host picks the class, which is then built on the detected config with `shrink` laid over it
    (detected_model_config lays its shrink over before the pick, which would then miss the class)."""
    model_config = detected_model_config(layout, None, expected_class)
    return type(model_config)({**model_config.unet_config, **shrink})


def borrowed_spiece_model(key="spiece_model"):
    """tokenizer_data holding, under `key`, the sentencepiece model ComfyUI ships (pile-T5's, 32000
    pieces). Gemma's, mT5's and umt5's travel inside their checkpoints, not with ComfyUI: the tiny
    encoders borrow this one (its ids are all valid ids of Gemma's larger embeddings; the tiny mT5
    and umt5 vocabularies are sized to it); only the token ids differ."""
    path = os.path.join(os.path.dirname(comfy.text_encoders.aura_t5.__file__), "t5_pile_tokenizer", "tokenizer.model")
    with open(path, "rb") as f:
        return {key: f.read()}


def zeroed(module):
    """`module` with every parameter a zero broadcast from one element: no memory, no init time."""
    for sub in module.modules():
        for key, p in list(sub.named_parameters(recurse=False)):
            setattr(sub, key, torch.nn.Parameter(torch.zeros((), dtype=p.dtype).expand(p.shape), requires_grad=False))
    return module


def text_encoder_without_vision(clip_target, generator, te_options, tower_class):
    """text_encoder() for encoders with a vision tower (`tower_class`) inside, which ComfyUI builds at
    its full size whatever the language model's config (Qwen2.5-VL's: 1280 wide, 32 blocks, 658 M
    parameters). The towers only read image prompts (edit models), so each is left as zeros in one
    shared element instead of gigabytes of random float32 (on a GPU, loading the CLIP would expand
    them); the language model is random as usual."""
    clip = comfy.sd.CLIP(target=clip_target, model_options={"dtype": torch.float32, **te_options})
    towers = [
        (parent, name, child)
        for parent in clip.cond_stage_model.modules()
        for name, child in parent.named_children()
        if isinstance(child, tower_class)
    ]
    for parent, name, _ in towers:
        delattr(parent, name)  # out of init_weights' reach
    init_weights(clip.cond_stage_model, generator)
    for parent, name, tower in towers:
        setattr(parent, name, zeroed(tower))
    return clip


def qwen25_vl_text_encoder(clip_target, generator, te_options):
    """text_encoder_without_vision for the Qwen2.5-VL encoders (Qwen-Image, HunyuanImage 2.1,
    Kandinsky 5, LongCat-Image)."""
    return text_encoder_without_vision(
        clip_target, generator, te_options, comfy.text_encoders.qwen_vl.Qwen2VLVisionTransformer
    )


def qwen3_vl_text_encoder(clip_target, generator, te_options):
    """text_encoder_without_vision for the Qwen3-VL encoders (Krea 2, JoyImage, Boogu)."""
    import comfy.text_encoders.qwen3vl  # (here: ComfyUI 0.3.75 has no Qwen3-VL)

    return text_encoder_without_vision(
        clip_target, generator, te_options, comfy.text_encoders.qwen3vl.Qwen3VLVisionModel
    )


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


# ComfyUI's llama_tokenizer: Llama 3's byte-level BPE (128256 tokens and 3 added ones).
LLAMA_TOKENIZER_DIR = os.path.join(os.path.dirname(comfy.text_encoders.flux.__file__), "llama_tokenizer")
LLAMA3_VOCAB = 128259


class Llama3VocabMistralTokenizer(comfy.sd1_clip.SDTokenizer):
    """A Mistral-3 tokenizer's settings (no end token, left padding, no minimum length) on the
    byte-level BPE vocabulary of Llama 3 that ComfyUI ships. The real one needs the 'tekken'
    vocabulary stored in the text-encoder file and the MistralConverter API of transformers 4.x
    (5.x changed it), neither of which a test machine has. A subclass names its encoder
    (EMBEDDING_KEY) and any further SDTokenizer option (OPTIONS)."""

    EMBEDDING_KEY = ""
    OPTIONS: dict = {}

    def __init__(self, embedding_directory=None, tokenizer_data=None):
        # PreTrainedTokenizerFast reads tokenizer.json as it is; transformers 5's LlamaTokenizerFast
        # rebuilds its pre-tokenizer and drops the spaces ("a photo" -> "aph", "oto").
        super().__init__(
            LLAMA_TOKENIZER_DIR,
            embedding_directory=embedding_directory,
            pad_with_end=False,
            embedding_size=LLAMA_TINY["hidden_size"],
            embedding_key=self.EMBEDDING_KEY,
            tokenizer_class=PreTrainedTokenizerFast,
            has_end_token=False,
            pad_to_max_length=False,
            pad_token=128004,
            max_length=99999999,
            min_length=1,
            pad_left=True,
            tokenizer_data=tokenizer_data or {},
            **self.OPTIONS,
        )
