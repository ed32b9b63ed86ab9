"""A diffusion model saved whole, as ComfyUI's UNETLoader loads it (models/diffusion_models): the
diffusion model's state dict without prefix, the layout ModelSave's state dict has before
`model.diffusion_model.` is put in front of it (comfy.sd.load_diffusion_model reads both)."""

from dataclasses import dataclass
from typing import Any

import torch

from .trained_file import FP8, TrainedFile

TRAINED_KIND = "eridiffusion_trained"  # the metadata entry naming what a run trained: "weights" here


@dataclass
class DiffusionModelFile(TrainedFile):
    """A diffusion model's every tensor under its state-dict name (on the CPU, as held), and the metadata."""

    source: Any = None  # the BaseModel (ComfyUI's) it is the diffusion model of: its config lays out a checkpoint

    what = "diffusion model"

    def saved_dtype(self, key: str, tensor: torch.Tensor, dtype: str) -> torch.dtype:
        if dtype == FP8:
            return torch.float8_e4m3fn if in_fp8(key, tensor) else torch.bfloat16
        return super().saved_dtype(key, tensor, dtype)


def in_fp8(key: str, tensor: torch.Tensor) -> bool:
    """Whether a diffusion model's tensor `key` is held in float8 in an fp8 file: a weight matrix or kernel
    (norms, biases and embeddings' vectors stay in bf16, as in ComfyUI's fp8 files)."""
    return key.endswith(".weight") and tensor.dim() >= 2


def diffusion_model_tensors(diffusion_model: torch.nn.Module, trained: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The state dict of `diffusion_model` (a BaseModel's `diffusion_model`) as a file holds it (on the CPU, each
    its own copy in the dtype it is held in: the file's save casts it), with the `trained` tensors ({state-dict
    name: tensor}) in place of its own."""
    return {
        key: trained.get(key, tensor).detach().to("cpu", copy=True)
        for key, tensor in diffusion_model.state_dict().items()
    }
