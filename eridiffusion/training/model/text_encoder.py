"""Training adapters on a CLIP's text encoder(s) next to the diffusion model's.

The CLIP is cloned and the adapters injected into the clone's patcher, as for the MODEL:
the input CLIP keeps encoding exactly as before. Captions are encoded every step (with
gradients), through the same `encode_from_tokens_scheduled` CLIPTextEncode uses; with CUDA graphs
the encoders' transformers replay from graphs (speed/graphed_text_encoder.py).
"""

import contextlib
import dataclasses
import hashlib
import re

import comfy.patcher_extension
import torch

from ...comfy_compat import encodings_kept_on, trainable_clip_clone
from ...errors import EriDiffusionError
from ...formats.lora_file import loadable_clip_keys
from ..adapters import attach_adapters
from ..adapters.from_tensors import adapters_from_tensors
from ..data.picture_prompts import encode_picture_prompt, shown_picture
from . import loading as model_loading
from .autograd_inplace import OutOfPlaceAugmentedAssignments
from .autograd_weights import frozen_weights_injection

# The text transformer's numbered blocks inside each encoder ComfyUI loads (`<name>.transformer.…`):
# CLIP's `text_model.encoder.layers.N`; T5's, UMT5's, mT5's and ByT5's `encoder.block.N`; an LLM's
# `model.layers.N` (Qwen2.5-VL, Qwen3, Mistral, Gemma, Llama); HunyuanDiT's BERT's `bert.encoder.layer.N`.
# An encoder's vision tower (Qwen2.5-VL's `visual.blocks`, Gemma 3's `vision_model.encoder.layers`)
# reads images, not the prompt, and stays frozen.
BLOCK_LISTS = r"text_model\.encoder\.layers|encoder\.block|model\.layers|bert\.encoder\.layer"
TEXT_BLOCKS = re.compile(rf"^([^.]+)\.transformer\.(?:{BLOCK_LISTS})\.\d+\.")
TEXT_BLOCK_MODULE = re.compile(rf"^([^.]+)\.transformer\.(?:{BLOCK_LISTS})\.\d+$")


def encoder_names(prefixes):
    """The names of the text encoders a CLIP holds (its weights' first part: clip_l, t5xxl, qwen25_7b, …)."""
    return sorted({k.split(".", 1)[0] for k in prefixes})


def named_encoders(encoders):
    """The encoder names of AdapterSpec.text_encoders' comma-separated text."""
    return {name.strip() for name in encoders.split(",") if name.strip()}


def text_blocks(prefixes):
    """{weight key: its encoder's name} of the text transformers' block weights among `prefixes`."""
    return {k: m.group(1) for k in prefixes if (m := TEXT_BLOCKS.match(k))}


def text_encoder_layers(prefixes, encoders=""):
    """The weights of the text transformers' blocks (attention and MLP), which text-encoder LoRAs adapt
    (kohya's for CLIP, OneTrainer's for T5); embeddings, projections and vision towers stay frozen.
    `encoders`: the encoders to train, comma-separated; empty: the CLIP encoders where the CLIP holds any
    (as before T5 and the LLMs trained, and as kohya's Flux and SD3 trainers do: T5-XXL's 4.7B weights train
    only when named), else every one."""
    blocks = text_blocks(prefixes)
    chosen = named_encoders(encoders)
    if not chosen:
        clips = {name for name in blocks.values() if name.startswith("clip_")}
        chosen = clips or set(blocks.values())
    return {k for k, name in blocks.items() if name in chosen}


def check_text_encoders(clip, encoders):
    """Refuses `encoders` (AdapterSpec.text_encoders) naming an encoder `clip` lacks, or none that trains."""
    prefixes = loadable_clip_keys(clip.cond_stage_model)
    names = encoder_names(prefixes)
    for name in sorted(named_encoders(encoders)):
        if name not in names:
            raise EriDiffusionError(
                f"text_encoders names '{name}', which the connected CLIP does not hold: it holds "
                f"{', '.join(names)}; name those to train (empty: its CLIP encoders, else every one)."
            )
    if not text_encoder_layers(prefixes, encoders):
        raise EriDiffusionError(
            f"text_encoders '{encoders}' has no transformer layers to train; of the CLIP's encoders "
            f"{', '.join(sorted(set(text_blocks(prefixes).values()))) or 'none'} can train."
        )


def check_what_trains(config):
    """TrainConfig `config`'s settings of what trains, together: text encoders named without their rate,
    block rates without the diffusion model, nothing to train at all, or a trained encoder beside a fixed
    encoding of the class phrase."""
    if named_encoders(config.adapter.text_encoders) and config.text_encoder_lr == 0:
        raise EriDiffusionError(
            f"text_encoders '{config.adapter.text_encoders}' names encoders to train, and text_encoder_lr is 0: "
            "set text_encoder_lr (about the learning_rate), or clear text_encoders."
        )
    if not config.adapter.train_diffusion_model and config.block_lr.strip():
        raise EriDiffusionError(
            "block_lr sets the rates of the diffusion model's blocks, and train_diffusion_model is off (the "
            "text encoders alone train): clear block_lr, or turn train_diffusion_model on."
        )
    if not config.adapter.train_diffusion_model and config.text_encoder_lr == 0:
        raise EriDiffusionError(
            "train_diffusion_model is off and text_encoder_lr is 0: nothing would train; set text_encoder_lr "
            "(about the learning_rate) to train the text encoders alone, or turn train_diffusion_model on."
        )
    if config.preservation_prompt.strip() and config.text_encoder_lr > 0:
        raise EriDiffusionError(
            "preservation_prompt compares predictions for one fixed encoding of the class phrase, which "
            "text-encoder training would change: set text_encoder_lr to 0, or clear preservation_prompt."
        )


class TextEncoderTraining:
    """`tensors`/`path`: a resume file whose text-encoder weights the adapters start from."""

    def __init__(self, clip, spec, seed, tensors=None, path=None, encodings_on_device=True):
        if spec.targets == "blocks":  # the layers are already restricted to the encoder's blocks
            spec = dataclasses.replace(spec, targets="all-linear")
        spec = dataclasses.replace(spec, include="", exclude="")  # (those name the diffusion model's layers)
        self.source = trainable_clip_clone(clip)  # the input CLIP as training sees it (see run/build.py)
        self.clip = self.source.clone()
        self.prefixes = loadable_clip_keys(self.clip.cond_stage_model)
        frozen_weights_injection(self.clip.patcher)
        layers = text_encoder_layers(self.prefixes, spec.text_encoders)
        self.trained_encoders = {key.split(".", 1)[0] for key in layers}
        self.used_keys = set()
        if tensors is None:
            self.adapters = attach_adapters(self.clip.patcher, spec, layers, seed=seed + 7919, prefix="")
        else:
            allowed = {k: v for k, v in self.prefixes.items() if k in layers}
            self.adapters, self.used_keys = adapters_from_tensors(self.clip.patcher.model, tensors, spec, allowed, path)
            self.adapters.to(self.clip.patcher.load_device).attach_to(self.clip.patcher)
        self.tokens = {}
        self.pictures = {}  # picture prompts' IMAGEs, by (path, mirrored)
        kept_vision_tokens(self.clip.patcher)
        self.graphed = None  # speed/graphed_text_encoder.GraphedEncoders, when the step path replays graphs
        self.encodings_on_device = encodings_on_device  # (SpeedPaths.encodings_on_device)
        self.clip.load_model = self._load_model  # (this clone's own attribute)

    def trained_blocks(self):
        """The blocks of the trained encoders' transformers (what gradient checkpointing recomputes: without
        it, backward keeps every layer's activations and the weights ComfyUI casts to the encoder's
        compute dtype for each product, fp32 for most encoders, twice the bf16 weights)."""
        return [
            module
            for name, module in self.clip.cond_stage_model.named_modules()
            if (m := TEXT_BLOCK_MODULE.match(name)) and m.group(1) in self.trained_encoders
        ]

    def _load_model(self, *args, **kwargs):
        """CLIP.load_model for the training clone, which ComfyUI's encoding calls every time: loading
        the CLIP again re-patches it (with dynamic VRAM, 0.28 re-injects the adapters and the weight
        aliases each time: 30 ms of an SDXL step), so while it is loaded whole it is left alone."""
        if model_loading.loaded_whole(self.clip.patcher):
            return self.clip.patcher
        with model_loading.as_comfyui_loads():
            return type(self.clip).load_model(self.clip, *args, **kwargs)

    def micro_batch_starts(self):
        if self.graphed is not None:
            self.graphed.micro_batch_starts()

    def conditioning(self, text, shown=None):
        """ComfyUI conditioning of `text` through the adapted encoder, with gradients; `shown`: a picture
        prompt's (reference image paths, mirrored), encoded as TextEncodeQwenImageEditPlus encodes it (the
        cache's picture_conditioning), the pictures' vision tokens computed once and kept."""
        device = self.clip.patcher.load_device
        # CLIP's layers add their residuals in place; the encoding stays on the GPU (no wait for it)
        on_device = encodings_kept_on(device) if self.encodings_on_device else contextlib.nullcontext()
        if shown is not None:  # (eagerly: the pictures' tokens change the encoder's input lengths)
            with OutOfPlaceAugmentedAssignments(), on_device:
                return encode_picture_prompt(self.clip, text, [self._picture(p, shown[1]) for p in shown[0]])
        if text not in self.tokens:
            self.tokens[text] = self.clip.tokenize(text)
        graphs = self.graphed.active() if self.graphed is not None else contextlib.nullcontext()
        with OutOfPlaceAugmentedAssignments(), graphs, on_device:
            return self.clip.encode_from_tokens_scheduled(self.tokens[text], show_pbar=False)

    def _picture(self, path, mirror):
        """The IMAGE a picture prompt shows of `path`, read once (8 bits a channel)."""
        key = (path, mirror)
        if key not in self.pictures:
            self.pictures[key] = (shown_picture(path, mirror) * 255).round().to(torch.uint8)
        return self.pictures[key].float() / 255

    def result_clip(self):
        """A clone of the input CLIP with the trained adapters attached."""
        self.adapters.requires_grad_(False)
        out = self.source.clone()
        self.adapters.attach_to(out.patcher)
        return out

    def unload(self):
        self.graphed = None
        model_loading.unload(self.clip.patcher)


VISION_KEY = "eridiffusion_kept_vision_tokens"


def kept_vision_tokens(patcher):
    """While `patcher` (a text encoder's training clone) is patched, each vision-language encoder's
    vision tower (frozen: its adapters train the text blocks alone) computes a picture's tokens once:
    its `preprocess_embed` keeps what it returned, keyed by the picture's pixels."""
    kept: dict = {}
    encoders = [m for m in patcher.model.modules() if "preprocess_embed" in type(m).__dict__]

    def inject(model_patcher):
        for encoder in encoders:
            encoder.preprocess_embed = _KeptEmbeds(encoder.preprocess_embed, kept)

    def eject(model_patcher):
        for encoder in encoders:
            encoder.__dict__.pop("preprocess_embed", None)

    patcher.set_injections(VISION_KEY, [comfy.patcher_extension.PatcherInjection(inject, eject)])


class _KeptEmbeds:
    def __init__(self, base, kept):
        self.base, self.kept = base, kept

    def __call__(self, embed, device):
        data = embed.get("data")
        if embed.get("type") != "image" or not isinstance(data, torch.Tensor):
            return self.base(embed, device)
        pixels = data.detach().to("cpu", torch.float32).contiguous()
        key = (id(self.base.__self__), tuple(pixels.shape), hashlib.blake2b(pixels.numpy().tobytes()).hexdigest())
        if key not in self.kept:
            with torch.no_grad():
                self.kept[key] = self.base(embed, device)
        return self.kept[key]
