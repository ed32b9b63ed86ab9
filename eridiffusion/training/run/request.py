"""One run, requested: the MODEL (a second one for two experts), the data, the settings and what comes
with them. LoRATrainer and the command line build the same RunRequest; preflight.py checks it once,
before the run's folder is made; train_run trusts it."""

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from ..adapters import AdapterSpec
from ..data.training_data import DataFacts, TrainingData
from ..samples.render import SampleSettings
from ..trained import TrainedBuilder, trained_for
from .config import TrainConfig
from .distributed import SINGLE_PROCESS, TrainingProcesses
from .resume import ResumePoint


@dataclass(frozen=True)
class RunRequest:
    """Everything a run is asked to train on and with. `data` is CacheLatents' TrainingData, or, on the
    command line before its images are encoded, the DataFacts of what it will encode."""

    model: Any  # ComfyUI's MODEL (a ModelPatcher); two experts: the high-noise one (None: not loaded yet)
    data: TrainingData | DataFacts | None  # (None: not read yet; preflight's SETTINGS_CHECKS need neither)
    config: TrainConfig
    clip: Any = None  # the graph's CLIP: text-encoder training, preservation_prompt
    resume: ResumePoint | None = None
    samples: SampleSettings | None = None
    processes: TrainingProcesses = SINGLE_PROCESS
    low_noise_model: Any = None  # two experts in one run (Wan 2.2 14B): the low-noise MODEL
    # what the run trains (trained/): None, what its AdapterSpec asks for (the resume point's, else `config`'s):
    # the model's own weights for algorithm full (sharded: sharding fsdp), else adapters
    trained: TrainedBuilder | None = None

    @property
    def spec(self) -> AdapterSpec:
        """The settings of what is trained: a resume point's (its file's), else the config's."""
        return self.resume.spec if self.resume is not None else self.config.adapter

    @property
    def builder(self) -> TrainedBuilder:
        """The TrainedBuilder of what the run trains (`trained`, else what its spec asks for)."""
        return self.trained if self.trained is not None else trained_for(self.spec, self.config.precision.sharding)

    @property
    def models(self) -> tuple[Any, ...]:
        """The MODELs trained: one, or the high- and the low-noise expert."""
        return (self.model,) if self.low_noise_model is None else (self.model, self.low_noise_model)

    @cached_property
    def facts(self) -> DataFacts:
        if isinstance(self.data, DataFacts):
            return self.data
        return DataFacts.of(self.training_data)

    @property
    def training_data(self) -> TrainingData:
        """The encoded data a run trains on (a request of DataFacts is for checking only)."""
        if not isinstance(self.data, TrainingData):
            raise TypeError("this RunRequest describes its data (DataFacts); give it CacheLatents' TrainingData")
        return self.data

    def with_data(self, data: TrainingData) -> "RunRequest":
        return dataclasses.replace(self, data=data)

    @property
    def device(self) -> torch.device:
        """The device the run trains on: the MODEL's, or TrainConfig's `device` where it names one."""
        return torch.device(self.config.device) if self.config.device != "auto" else self.model.load_device
