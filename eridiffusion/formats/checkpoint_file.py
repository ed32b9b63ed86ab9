"""A fine-tuned diffusion model saved as ComfyUI's CheckpointSave lays a checkpoint out (CheckpointLoaderSimple
reads it from models/checkpoints): the model's tensors under its config's prefix (`model.diffusion_model.` for
the UNets), the graph's CLIP and VAE under theirs, and the prediction-type markers; and the settings of
SaveFineTune, which writes it or the diffusion model alone (models/diffusion_models, UNETLoader)."""

from dataclasses import dataclass, field
from typing import Any

import torch

from ..comfy_compat import clip_weights_for_saving
from ..errors import EriDiffusionError
from ..settings import check_settings, setting
from .model_file import DiffusionModelFile, in_fp8
from .trained_file import FP8, SAVE_DTYPES, TrainedFile

SAVED_AS = {"checkpoint": "checkpoints", "diffusion_model": "diffusion_models"}  # {save_as: ComfyUI's folder}


@dataclass(frozen=True)
class FineTuneSaveSettings:
    """SaveFineTune's inputs."""

    filename_prefix: str = setting(
        "eridiffusion/my_fine_tune", "Name inside models/checkpoints or models/diffusion_models (subfolders allowed)."
    )
    save_as: str = setting(
        "checkpoint",
        "checkpoint: the model with the connected CLIP and VAE in models/checkpoints, as CheckpointSave writes it "
        "(CheckpointLoaderSimple loads it); diffusion_model: the model alone in models/diffusion_models (UNETLoader).",
        choices=tuple(SAVED_AS),
    )
    dtype: str = setting(
        "bf16",
        "Precision of the saved weights (the CLIP's and VAE's too). fp8_e4m3fn: the diffusion model's weight "
        "matrices and kernels in float8 (about half of bf16's file, as UNETLoader's fp8 files; each weight "
        "rounded to fp8's 3 mantissa bits), the rest and the CLIP and VAE in bf16.",
        choices=(*SAVE_DTYPES, FP8),
    )
    overwrite: bool = setting(False, "Replace an existing file of that name (otherwise a number is appended).")

    def __post_init__(self) -> None:
        check_settings(self, "SaveFineTune")


@dataclass
class CheckpointFile(TrainedFile):
    """A checkpoint's every tensor (the model's, the CLIP's, the VAE's) under ComfyUI's names, and the metadata."""

    what = "checkpoint"
    model_keys: frozenset[str] = field(default_factory=frozenset)  # the diffusion model's tensors (the rest: CLIP, VAE)

    def saved_dtype(self, key: str, tensor: torch.Tensor, dtype: str) -> torch.dtype:
        if dtype == FP8:
            return torch.float8_e4m3fn if key in self.model_keys and in_fp8(key, tensor) else torch.bfloat16
        return super().saved_dtype(key, tensor, dtype)


def checkpoint_of(model: DiffusionModelFile, clip: Any = None, vae: Any = None) -> CheckpointFile:
    """The checkpoint of a trained diffusion model `model` with ComfyUI's CLIP `clip` and VAE `vae` (either may
    be None), laid out by its BaseModel's config as comfy.sd.save_checkpoint lays it out, with its metadata."""
    base = model.source
    if base is None:
        raise EriDiffusionError(
            "this diffusion model file was read back from disk, not trained in this graph: a checkpoint is laid out "
            "by the model it was trained on. Save it as diffusion_model, or load it with UNETLoader and save the "
            "checkpoint with ComfyUI's CheckpointSave."
        )
    config = base.model_config
    tensors = config.process_unet_state_dict_for_saving(dict(model.tensors))
    model_keys = frozenset(tensors)
    if base.model_type.name == "V_PREDICTION":  # as CheckpointSave marks it (ComfyUI's loader reads it back)
        tensors["v_pred"] = torch.tensor([])
        if getattr(base.model_sampling, "zsnr", False):
            tensors["ztsnr"] = torch.tensor([])
    if clip is not None:
        tensors.update(config.process_clip_state_dict_for_saving(clip_weights_for_saving(clip)))
    if vae is not None:
        vae_weights = {k: v.detach().to("cpu", copy=True) for k, v in vae.get_sd().items()}
        tensors.update(config.process_vae_state_dict_for_saving(vae_weights))
    return CheckpointFile(tensors, dict(model.metadata), model_keys=model_keys)
