"""Loading the model a config names, with ComfyUI's own loaders (one checkpoint file, or a
diffusion model + text encoders + VAE, as the loader nodes load them) or as a tiny demo stack, and
checking that it is the family the config says."""

import os
from dataclasses import dataclass

from ..errors import EriDiffusionError
from ..settings import check_settings, setting
from .model_files import existing, loading

TINY_MODELS = {"tiny-sdxl": "sdxl", "tiny-sd15": "sd15"}

# What `arch` may say (ai-toolkit's names and its is_xl/is_flux/... flags), and the ComfyUI model
# classes each name covers; ComfyUI's class names (SDXL, Flux, WAN21_T2V, ...) are accepted too.
ARCH_CLASSES = {
    "sd1": ("SD15",),
    "sd15": ("SD15",),
    "sdxl": ("SDXL", "SSD1B", "Segmind_Vega", "KOALA_700M", "KOALA_1B"),
    "ssd": ("SSD1B",),
    "vega": ("Segmind_Vega",),
    "sd3": ("SD3",),
    "sd35": ("SD3",),
    "flux": ("Flux", "FluxInpaint", "FluxSchnell"),
    "flux_kontext": ("Flux",),
    "flex1": ("Flux",),
    "flex2": ("Flux",),
    "flux2": ("Flux2",),
    "chroma": ("Chroma",),
    "hidream": ("HiDream",),
    "lumina2": ("Lumina2",),
    "zimage": ("ZImage",),
    "qwen_image": ("QwenImage",),
    "omnigen2": ("Omnigen2",),
    "auraflow": ("AuraFlow",),
    "pixart": ("PixArtAlpha",),
    "pixart_sigma": ("PixArtSigma",),
    "wan21": ("WAN21_T2V",),
    "wan22_14b": ("WAN21_T2V",),
    "wan21_i2v": ("WAN21_I2V",),
    "wan22_14b_i2v": ("WAN21_T2V",),
    "wan22_5b": ("WAN22_T2V",),
    "ltxv": ("LTXV",),
    "hunyuan_video": ("HunyuanVideo",),
}
# UNETLoader's weight_dtype choices as model_options (its load_unet).
WEIGHT_DTYPE_OPTIONS = {
    "default": {},
    "fp8_e4m3fn": {"dtype": "float8_e4m3fn"},
    "fp8_e4m3fn_fast": {"dtype": "float8_e4m3fn", "fp8_optimizations": True},
    "fp8_e5m2": {"dtype": "float8_e5m2"},
}


def _weight_dtypes():
    import nodes  # ComfyUI's own

    return tuple(nodes.UNETLoader.INPUT_TYPES()["required"]["weight_dtype"][0])


def _clip_types():
    import comfy.sd

    return tuple(t.name.lower() for t in comfy.sd.CLIPType)


@dataclass(frozen=True)
class ModelSource:
    """The `model` section: where MODEL, CLIP and VAE come from, loaded as ComfyUI's loader nodes load
    them (the choices are those loaders')."""

    checkpoint: str = setting(
        "",
        "One .safetensors file with model, text encoders and VAE (CheckpointLoaderSimple), or tiny-sdxl / tiny-sd15.",
        path=True,
    )
    diffusion_model: str = setting("", "The diffusion model file alone (UNETLoader).", path=True)
    weight_dtype: str = setting(
        "default",
        "Storage type of the diffusion model's weights, as UNETLoader's weight_dtype.",
        choices=_weight_dtypes,
    )
    text_encoders: tuple[str, ...] = setting((), "Text encoder files (CLIPLoader, DualCLIPLoader, ...).", path=True)
    clip_type: str = setting(
        "stable_diffusion",
        "What the text encoder files are for, as CLIPLoader's type (flux, sd3, wan, ...).",
        choices=_clip_types,
    )
    vae: str = setting("", "The VAE file (VAELoader).", path=True)
    clip_vision: str = setting(
        "",
        "Image-to-video (cache.start_image): the image encoder file (CLIPVisionLoader; Wan 2.1 I2V: "
        "clip_vision_h, HunyuanVideo 1.5 I2V: SigLIP) whose features of the start image the model reads too.",
        path=True,
    )
    audio_vae: str = setting(
        "",
        "Audio-video models (LTX-2): the audio VAE file (LTXVAudioVAELoader; the LTX-2 checkpoint itself holds "
        "one): each clip's audio track is trained on too and the samples have sound.",
        path=True,
    )
    low_noise_model: str = setting(
        "",
        "Two experts in one run (Wan 2.2 14B): the low-noise model's diffusion model file (UNETLoader, at "
        "weight_dtype), diffusion_model being the high-noise one; both are trained and saved (…_high_noise, "
        "…_low_noise).",
        path=True,
    )
    arch: str = setting(
        "",
        "Optional: the family the files must be (sdxl, flux, sd3, wan21, ... or ComfyUI's class name); "
        "another family is an error.",
    )

    def __post_init__(self):
        check_settings(self, "model")
        if bool(self.checkpoint) == bool(self.diffusion_model):
            raise EriDiffusionError(
                "model: give either checkpoint (one file, or tiny-sdxl / tiny-sd15) or "
                "diffusion_model (with text_encoders and vae), not "
                f"{'both' if self.checkpoint else 'neither'}."
            )
        if self.diffusion_model and not (self.text_encoders and self.vae):
            raise EriDiffusionError(
                "model.diffusion_model needs model.text_encoders (one or more files, with "
                "clip_type) and model.vae: a diffusion model file holds neither."
            )
        if self.low_noise_model and not self.diffusion_model:
            raise EriDiffusionError(
                "model.low_noise_model is the low-noise expert's diffusion model: give the high-noise one as "
                "model.diffusion_model (with text_encoders and vae), not as a checkpoint."
            )
        if self.tiny and (self.text_encoders or self.vae or self.weight_dtype != "default"):
            raise EriDiffusionError(
                f"model.checkpoint {self.checkpoint} is a built-in tiny model: it takes no "
                "text_encoders, vae or weight_dtype."
            )
        if self.arch and not arch_classes(self.arch):
            raise EriDiffusionError(
                f"model.arch '{self.arch}' is not a model family name; use one of "
                f"{', '.join(ARCH_CLASSES)} or ComfyUI's model class name."
            )

    @property
    def tiny(self):
        return TINY_MODELS.get(self.checkpoint)

    def describe(self):
        if self.checkpoint:
            return self.checkpoint
        return os.path.basename(self.diffusion_model)


def arch_classes(arch):
    """The ComfyUI model classes `arch` names, or () when it names none."""
    from ..training.model.families import FAMILIES

    name = arch.strip().lower()
    if name in ARCH_CLASSES:
        return ARCH_CLASSES[name]
    return tuple(c for family in FAMILIES for c in family.config_classes if c.lower() == name)[:1]


def _model_options(weight_dtype):
    import torch

    return {k: getattr(torch, v) if k == "dtype" else v for k, v in WEIGHT_DTYPE_OPTIONS[weight_dtype].items()}


def load_models(source):
    """(MODEL, CLIP, VAE) for `source`, each loaded as ComfyUI's loader node for it does (its files'
    headers checked before, by check_model_files: run.checked_settings)."""
    if source.tiny:
        from ..tiny_models import build_tiny_demo

        return build_tiny_demo(source.tiny, seed=0)
    options = _model_options(source.weight_dtype)
    if source.checkpoint:
        model, clip, vae = load_checkpoint(
            source.checkpoint, options, with_clip=not source.text_encoders, with_vae=not source.vae
        )
    else:
        model, clip, vae = load_diffusion_model(source.diffusion_model, options), None, None
    if source.text_encoders:
        clip = load_text_encoders(source.text_encoders, source.clip_type)
    if source.vae:
        vae = load_vae(source.vae)
    return model, clip, vae


def load_audio_vae(source):
    """The audio VAE of an audio-video model (LTXVAudioVAELoader's load), or None."""
    if not source.audio_vae:
        return None
    import comfy.sd
    import comfy.utils

    path = existing(source.audio_vae, "audio_vae")
    with loading(path, "audio_vae"):
        state, metadata = comfy.utils.load_torch_file(path, return_metadata=True)
        state = comfy.utils.state_dict_prefix_replace(
            state, {"audio_vae.": "autoencoder.", "vocoder.": "vocoder."}, filter_keys=True
        )
        vae = comfy.sd.VAE(sd=state, metadata=metadata)
        vae.throw_exception_if_invalid()
    return vae


def load_clip_vision(source):
    """The image encoder of image-to-video training (CLIPVisionLoader's load), or None."""
    if not source.clip_vision:
        return None
    import comfy.clip_vision

    path = existing(source.clip_vision, "clip_vision")
    with loading(path, "clip_vision"):
        return comfy.clip_vision.load(path)


def load_low_noise_model(source):
    """The low-noise expert's MODEL of a two-expert run (UNETLoader's load), or None."""
    if not source.low_noise_model:
        return None
    return load_diffusion_model(source.low_noise_model, _model_options(source.weight_dtype))


def check_model_files(source):
    """Every model file of `source` checked before any is loaded: a wrong VAE path is named at once,
    not after minutes of loading the diffusion model."""
    for key in ("checkpoint", "diffusion_model", "vae", "low_noise_model", "audio_vae", "clip_vision"):
        if getattr(source, key):
            existing(getattr(source, key), key)
    for path in source.text_encoders or ():
        existing(path, "text_encoders")


def load_checkpoint(path, model_options, with_clip=True, with_vae=True, required=True):
    """CheckpointLoaderSimple's load (with UNETLoader's weight_dtype options for its model); without
    `required`, a checkpoint that lacks the text encoder or VAE gives None for it."""
    import comfy.sd
    import folder_paths

    path = existing(path, "checkpoint")
    with loading(path, "checkpoint"):
        model, clip, vae = comfy.sd.load_checkpoint_guess_config(
            path,
            output_vae=with_vae,
            output_clip=with_clip,
            embedding_directory=folder_paths.get_folder_paths("embeddings"),
            model_options=model_options,
        )[:3]
    if with_clip and clip is None and required:
        raise EriDiffusionError(
            f"model.checkpoint {path} holds no text encoder; add model.text_encoders (and clip_type)."
        )
    if with_vae and vae is None and required:
        raise EriDiffusionError(f"model.checkpoint {path} holds no VAE; add model.vae.")
    return model, clip, vae


def load_diffusion_model(path, model_options):
    """UNETLoader's load."""
    import comfy.sd

    path = existing(path, "diffusion_model")
    with loading(path, "diffusion_model"):
        return comfy.sd.load_diffusion_model(path, model_options=model_options)


def load_text_encoders(paths, clip_type):
    """CLIPLoader's (DualCLIPLoader's, ...) load of one or more text encoder files."""
    import comfy.sd
    import folder_paths

    paths = [existing(p, "text_encoders") for p in paths]
    with loading(", ".join(paths), "text_encoders"):
        return comfy.sd.load_clip(
            ckpt_paths=paths,
            embedding_directory=folder_paths.get_folder_paths("embeddings"),
            clip_type=comfy.sd.CLIPType[clip_type.upper()],
        )


def load_vae(path):
    """VAELoader's load of a VAE file."""
    import comfy.sd
    import comfy.utils

    path = existing(path, "vae")
    with loading(path, "vae"):
        sd, metadata = comfy.utils.load_torch_file(path, return_metadata=True)
        vae = comfy.sd.VAE(sd=sd, metadata=metadata)
        vae.throw_exception_if_invalid()
    return vae


def model_family(model, source):
    """The Family ComfyUI's detection makes of `model`; an error when `source.arch` names another."""
    from ..training.model.families import family_of

    family = family_of(model.model)  # raises, naming the class, for a model no family covers
    loaded_as = type(model.model.model_config).__name__
    if source.arch and loaded_as not in arch_classes(source.arch):
        raise EriDiffusionError(
            f"model.arch is '{source.arch}', but {source.describe()} loads as ComfyUI's "
            f"{loaded_as} ({family.name}); correct arch or the file."
        )
    return family
