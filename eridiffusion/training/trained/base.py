"""The interface of what a run trains. The loop, resume, checkpoints, the EMA, the optimizer and the
step's speed paths see a run's Trained only: adapters (adapters.py) are one kind; a model's own
weights or its norms would be others, built by a TrainedBuilder of their own."""

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ...formats.trained_file import TrainedFile
from ..adapters import AdapterSet, AdapterSpec
from ..model.text_encoder import TextEncoderTraining


@dataclass(frozen=True)
class TrainedSetup:
    """What a run hands the builder of what it trains (run/build.py), before the step's injections."""

    patcher: Any  # the MODEL's training clone (ComfyUI's ModelPatcher): the trained change goes on it
    spec: AdapterSpec  # the settings of what is trained (a resumed run: its file's), targets resolved
    seed: int
    clip: Any = None  # the graph's CLIP when the text encoder trains too (text_encoder_lr > 0), else None
    encodings_on_device: bool = True  # a trained text encoder's encodings kept on its device (SpeedPaths)
    saved: dict[str, torch.Tensor] | None = None  # a resume file's tensors: the trained values start there
    saved_path: str | None = None  # that file (its errors name it)
    weights_dtype: torch.dtype = torch.float32  # a model's own trained weights are held in (fine_tune_dtype)
    compute_dtype: torch.dtype = torch.float32  # the model computes in (TrainConfig's dtype)
    group: Any = None  # the processes' device group (torch.distributed) in a run of several, else None
    # a model's own weights trained: the trained layers' own tensors stay in host memory (their copies compute in
    # their place), where nothing computes with them each step (no block swap, no preservation loss)
    originals_in_host_memory: bool = False


class Trained(ABC):
    """What a run trains: tensors listed once, which the optimizer updates, the EMA averages, a
    checkpoint saves and a resume reads back (through the builder), and the change they make to
    the diffusion model (and the text encoder) it trains on and to the result's clones."""

    # the trained CLIP clone that encodes each step's captions, when the text encoder trains, else None
    text_encoder: TextEncoderTraining | None = None

    @abstractmethod
    def parameters(self) -> list[torch.nn.Parameter]:
        """Every trained tensor, in one order that never changes: the optimizer's state, the EMA, the
        gradients averaged over processes and a resumed state line up by it. The same list each call."""

    @abstractmethod
    def parameter_groups(self, learning_rate: float, block_lr: str, text_encoder_lr: float) -> list[dict[str, Any]]:
        """The optimizer's parameter groups: the diffusion model's tensors at `learning_rate` (times
        `block_lr`'s multiplier of their block), the text encoder's at `text_encoder_lr`."""

    @abstractmethod
    def file_content(self, metadata: dict[str, str]) -> TrainedFile:
        """The trained values as a file's content, of the kind's own format (adapters: a TrainedLoRA, a
        model's weights: a DiffusionModelFile), under the names ComfyUI's loaders apply (fp32, on the CPU),
        with the run's `metadata` added: what checkpoints, best.safetensors and the result hold. Asked of
        every process of a run at once (sharded weights are gathered by all of them); rank 0 writes it."""

    @abstractmethod
    def apply_to(self, patcher: Any) -> None:
        """Put the trained change on `patcher`, a clone of the input MODEL (the result MODEL)."""

    @abstractmethod
    def result_clip(self) -> Any:
        """A clone of the input CLIP with the trained change, when the text encoder trained, else None."""

    @abstractmethod
    def bypassed(self) -> contextlib.AbstractContextManager[None]:
        """The diffusion model computes as without the trained change inside the block (the target of
        differential output preservation), then as before."""

    @abstractmethod
    def requires_grad_(self, requires_grad: bool) -> None:
        """Every trained tensor requires grad, or none does (the result)."""

    @abstractmethod
    def model_part(self) -> torch.nn.Module:
        """The diffusion model's trained tensors as one module: what a CUDA graph of the step takes as
        trained inputs (the text encoder's reach it through the encoding)."""

    def optimizer_state(self, optimizer: torch.optim.Optimizer, folder: str) -> dict[str, Any]:
        """What the training state holds of `optimizer`'s state (asked of every process at once; rank 0 writes
        the state): its state dict, which every process holds whole. Sharded weights write their shards to
        `folder` and name it instead."""
        return optimizer.state_dict()

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, saved: dict[str, Any], folder: str) -> None:
        """Set `optimizer`'s state to what optimizer_state gave (`folder`: where it wrote shards)."""
        optimizer.load_state_dict(saved)

    def adapter_set(self) -> AdapterSet | None:
        """The diffusion model's adapters, which the speed paths made for adapters work on (compute
        copies, fp8 products of the frozen layers under them); None where no adapter is trained."""
        return None

    def release(self) -> None:
        """Hand back what training loaded beside the MODEL (the text encoder's clone)."""
        if self.text_encoder is not None:
            self.text_encoder.unload()


TrainedBuilder = Callable[[TrainedSetup], Trained]  # what a run trains, built on its clone (fresh or resumed)
