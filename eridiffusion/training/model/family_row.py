"""One row of the support table: a model family, keyed by ComfyUI's model config classes, with its
training defaults (adapter targets, timestep sampling) and where those come from."""

from dataclasses import dataclass

import comfy.supported_models

from .objective import ObjectiveSpec

# Adapter target presets (training/adapters/attach.py): UNets train their attention, as kohya's
# default LoRA does; transformers train every linear layer of their repeated blocks, as
# ai-toolkit and musubi-tuner do (embedders and the final layer stay frozen).
UNET_TARGETS = "attention"
DIT_TARGETS = "blocks"


@dataclass(frozen=True)
class Family:
    name: str  # as the README names it
    config_classes: tuple[str, ...]  # comfy.supported_models class names that load as this family
    targets: str  # default adapter targets preset
    sampling: ObjectiveSpec  # default timestep sampling
    reference: str  # whose trainer the default follows
    latent_patch: int = 2  # latent pixels per token side (for resolution-dependent shift)
    prediction: str = "rectified flow"  # what the network predicts, as ComfyUI's model_sampling says
    guidance: float | None = None  # guidance fed while training guidance-distilled models (None: the
    # model's own ComfyUI default)
    copies_saved_activations: bool = False  # ComfyUI's forward writes in place into saved tensors
    # (training/model/autograd_saved.py)
    medium: str = "image"  # what its dataset holds: "image" (images and clips) or "audio" (audio files)
    generic: bool = False  # no tested row: trained with the host's own model_sampling (generic_family)
    expert_boundary: float = 0.0  # two-expert models (Wan 2.2 14B): the σ where the high-noise expert hands
    # over to the low-noise one (0: none)

    def host_has(self):
        return any(hasattr(comfy.supported_models, c) for c in self.config_classes)


def timestep_sampling(kind, **values):
    return ObjectiveSpec(timestep_sampling=kind, **values)


EPS_V = "ε / v (discrete)"
UNIFORM = timestep_sampling("uniform")
LOGIT_NORMAL = timestep_sampling("logit_normal", logit_mean=0.0, logit_std=1.0)
FLUX_SHIFT = timestep_sampling("shift", shift=0.0)  # sigmoid(N(0,1)) shifted by the image size (Flux's rule)


def flow_shift(value):
    return timestep_sampling("shift", shift=value)


# Wan 2.2 14B's two experts as ComfyUI's Wan 2.2 14B templates split them: 20 steps at shift 8 (its
# ModelSamplingSD3), the high-noise model for steps 0-10 and the low-noise one from 10 on, so the hand-over
# is at σ = shifted(10/20, 8) = 8/9 (Wan's own configs: 0.875 text-to-video, 0.9 image-to-video).
WAN22_EXPERT_BOUNDARY = 8 * 0.5 / (1 + 7 * 0.5)
