"""The model families EriDiffusion trains, keyed by ComfyUI's model config class, with each
family's training defaults (adapter targets, timestep sampling) and where those come from."""

from dataclasses import dataclass, replace

import comfy.supported_models

from ...errors import EriDiffusionError
from .objective import ObjectiveSpec

# Adapter target presets (training/adapters/attach.py): UNets train their attention, as kohya's
# default LoRA does; transformers train every linear layer of their repeated blocks, as
# ai-toolkit and musubi-tuner do (embedders and the final layer stay frozen).
UNET_TARGETS = "attention"
DIT_TARGETS = "blocks"


@dataclass(frozen=True)
class Family:
    name: str  # as the README names it
    config_classes: tuple  # comfy.supported_models class names that load as this family
    targets: str  # default adapter targets preset
    sampling: ObjectiveSpec  # default timestep sampling
    reference: str  # whose trainer the default follows
    latent_patch: int = 2  # latent pixels per token side (for resolution-dependent shift)
    prediction: str = "rectified flow"  # what the network predicts, as ComfyUI's model_sampling says
    guidance: float | None = None  # guidance fed while training guidance-distilled models (None: the
    # model's own ComfyUI default)
    copies_saved_activations: bool = False  # ComfyUI's forward writes in place into saved tensors
    # (training/model/autograd_saved.py)

    def host_has(self):
        return any(hasattr(comfy.supported_models, c) for c in self.config_classes)


def _sampling(kind, **values):
    return ObjectiveSpec(timestep_sampling=kind, **values)


EPS_V = "ε / v (discrete)"
UNIFORM = _sampling("uniform")
LOGIT_NORMAL = _sampling("logit_normal", logit_mean=0.0, logit_std=1.0)
FLUX_SHIFT = _sampling("shift", shift=0.0)  # sigmoid(N(0,1)) shifted by the image size (Flux's rule)


def _shift(value):
    return _sampling("shift", shift=value)


FAMILIES = (
    Family("SD 1.5", ("SD15",), UNET_TARGETS, UNIFORM, "kohya sd-scripts", prediction=EPS_V),
    Family(
        "SDXL",
        ("SDXL", "SSD1B", "Segmind_Vega", "KOALA_700M", "KOALA_1B"),
        UNET_TARGETS,
        UNIFORM,
        "kohya sd-scripts",
        prediction=EPS_V,
    ),
    Family(
        "SD3 / SD3.5 (Medium, Large, Large Turbo)",
        ("SD3",),
        DIT_TARGETS,
        LOGIT_NORMAL,
        "SD3 paper; diffusers' SD3 LoRA trainer",
    ),
    # Flux.1 dev and HunyuanVideo are guidance-distilled; kohya, ai-toolkit and musubi-tuner train them
    # with guidance 1.0.
    Family(
        "Flux.1 dev (and Flex-style variants)",
        ("Flux", "FluxInpaint"),
        DIT_TARGETS,
        FLUX_SHIFT,
        "kohya sd-scripts `flux_shift`",
        guidance=1.0,
    ),
    Family(
        "Flux.1 Kontext (edit pairs)", ("Flux",), DIT_TARGETS, FLUX_SHIFT, "kohya sd-scripts `flux_shift`", guidance=1.0
    ),
    Family("Flux.1 schnell", ("FluxSchnell",), DIT_TARGETS, FLUX_SHIFT, "kohya sd-scripts `flux_shift`"),
    Family("Flux.2", ("Flux2",), DIT_TARGETS, FLUX_SHIFT, "Flux.1's rule (kohya `flux_shift`)", latent_patch=1),
    Family("Chroma", ("Chroma",), DIT_TARGETS, FLUX_SHIFT, "Flux.1's rule (Chroma is a Flux.1-schnell derivative)"),
    Family("HiDream-I1", ("HiDream",), DIT_TARGETS, _shift(3.0), "HiDream's own flow shift"),
    Family("Lumina Image 2.0", ("Lumina2",), DIT_TARGETS, _shift(6.0), "Lumina 2's own flow shift"),
    Family("Z-Image", ("ZImage",), DIT_TARGETS, _shift(3.0), "Z-Image's own flow shift"),
    Family("Qwen-Image", ("QwenImage",), DIT_TARGETS, _shift(2.2), "musubi-tuner"),
    Family("OmniGen2", ("Omnigen2",), DIT_TARGETS, LOGIT_NORMAL, "OmniGen2's own trainer"),
    Family("HunyuanImage 2.1", ("HunyuanImage21",), DIT_TARGETS, _shift(5.0), "musubi-tuner", latent_patch=1),
    Family("AuraFlow", ("AuraFlow",), DIT_TARGETS, LOGIT_NORMAL, "SimpleTuner (as SD3)"),
    Family(
        "PixArt-α / Σ", ("PixArtAlpha", "PixArtSigma"), DIT_TARGETS, UNIFORM, "PixArt's train scripts", prediction=EPS_V
    ),
    Family("Wan 2.1 text-to-video (and Wan 2.2 14B)", ("WAN21_T2V",), DIT_TARGETS, _shift(3.0), "musubi-tuner"),
    Family("Wan 2.1 VACE", ("WAN21_Vace",), DIT_TARGETS, _shift(3.0), "musubi-tuner"),
    Family("Wan 2.2 TI2V 5B", ("WAN22_T2V",), DIT_TARGETS, _shift(3.0), "musubi-tuner"),
    Family(
        "LTX-Video",
        ("LTXV",),
        DIT_TARGETS,
        FLUX_SHIFT,
        "LTX-Video-Trainer (shifted logit-normal)",
        latent_patch=1,
        copies_saved_activations=True,
    ),
    Family("HunyuanVideo", ("HunyuanVideo",), DIT_TARGETS, _shift(7.0), "musubi-tuner", guidance=1.0),
    Family("HunyuanVideo 1.5", ("HunyuanVideo15",), DIT_TARGETS, _shift(7.0), "musubi-tuner", latent_patch=1),
    # Kandinsky 5 samples with shift 10 (its own scheduler_scale, ComfyUI's sampling_settings);
    # musubi-tuner's Kandinsky 5 recipe trains with shift 5.
    Family("Kandinsky 5.0 Video (Lite, Pro)", ("Kandinsky5",), DIT_TARGETS, _shift(5.0), "musubi-tuner"),
    # LTX-2 is an audio-video model; ComfyUI runs it video-only when the latent is a plain video latent
    # (no audio tokens: the audio stream and the audio-video cross-attention are skipped), which is how
    # it trains here. Its blocks write in place into activations autograd saved, as LTX-Video's do.
    Family(
        "LTX-2 (video)",
        ("LTXAV",),
        DIT_TARGETS,
        FLUX_SHIFT,
        "LTX-2's ltx-trainer (shifted logit-normal)",
        latent_patch=1,
        copies_saved_activations=True,
    ),
    # The image families ComfyUI 0.2x added. kohya's Anima trainer defaults to `sigmoid` sampling at scale 1,
    # which is logit-normal(0, 1); LongCat-Image's pipeline shifts by the image size as Flux.1's does.
    Family(
        "Kandinsky 5.0 Image Lite", ("Kandinsky5Image",), DIT_TARGETS, _shift(3.0), "Kandinsky 5 Image's own flow shift"
    ),
    Family("LongCat-Image", ("LongCatImage",), DIT_TARGETS, FLUX_SHIFT, "Flux.1's rule (kohya `flux_shift`)"),
    Family("ERNIE-Image", ("ErnieImage",), DIT_TARGETS, _shift(3.0), "ERNIE-Image's own flow shift", latent_patch=1),
    Family("Anima", ("Anima",), DIT_TARGETS, LOGIT_NORMAL, "kohya sd-scripts (`sigmoid`)"),
    # Upstream ComfyUI lacks these in 0.3.75: the row stays, and the error says so.
    Family("Sana", ("Sana", "SanaMS"), DIT_TARGETS, FLUX_SHIFT, "—"),
    Family("Kolors", ("Kolors",), UNET_TARGETS, UNIFORM, "—", prediction=EPS_V),
)


def family_of(base_model):
    """The Family of a ComfyUI BaseModel, from its model config class."""
    name = type(base_model.model_config).__name__
    for family in FAMILIES:
        if name in family.config_classes:
            return family
    supported = ", ".join(f.name for f in FAMILIES if f.host_has())
    raise EriDiffusionError(
        f"EriDiffusion cannot train this model yet: ComfyUI loaded it as '{name}', which is not "
        f"one of the supported families ({supported})."
    )


def family_named(name):
    """The Family whose README name is `name`; a clear error where this ComfyUI lacks it."""
    for family in FAMILIES:
        if family.name == name:
            if not family.host_has():
                raise EriDiffusionError(
                    f"{name} is not supported by this ComfyUI: it has no "
                    f"{'/'.join(family.config_classes)} model class. Update ComfyUI to a "
                    "version that loads it."
                )
            return family
    raise EriDiffusionError(f"unknown model family '{name}'; see the README's support table.")


def resolve_objective(spec, family):
    """`spec` with "auto" timestep sampling replaced by the family's default."""
    if spec.timestep_sampling != "auto":
        return spec
    default = family.sampling
    return replace(
        spec,
        timestep_sampling=default.timestep_sampling,
        logit_mean=default.logit_mean,
        logit_std=default.logit_std,
        sigmoid_scale=default.sigmoid_scale,
        shift=default.shift,
    )


def resolve_targets(targets, family):
    """The adapter targets preset: the family's default for "auto"."""
    return family.targets if targets == "auto" else targets
