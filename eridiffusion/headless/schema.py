"""What each section of a config file may hold, read from the same setting declarations the nodes
are built from (eridiffusion/settings.py): a node's section holds that node's settings, so the file and
the graph cannot drift apart; `model` and `logging` hold what no node does."""

from dataclasses import dataclass

from ..formats.lora_file import SaveSettings
from ..settings import Setting, setting, settings_of
from ..training.data.dataset_settings import DatasetSettings
from ..training.data.training_data import CacheSettings
from ..training.run.config import training_settings
from ..training.samples.sampler_settings import SamplerSettings
from .models import ModelSource

# Sections named after the node whose inputs they hold. `objective` and `sample` are the
# trainer's optional inputs, `validation_dataset` and `regularization_dataset` second LoadDatasets
# into CacheLatents' inputs of those names: a section left out (or null) is a node not connected.
NODE_SECTIONS = (
    "dataset",
    "cache",
    "train",
    "objective",
    "sample",
    "save",
    "validation_dataset",
    "regularization_dataset",
)
OPTIONAL_SECTIONS = ("objective", "sample", "validation_dataset", "regularization_dataset")
DATASET_SECTIONS = ("dataset", "validation_dataset", "regularization_dataset")  # LoadDataset's inputs each
SECTIONS = ("model",) + NODE_SECTIONS + ("logging",)


@dataclass(frozen=True)
class LoggingSettings:
    """The `logging` section."""

    tensorboard: bool = setting(
        False, "Write TensorBoard event files to output/<run>/tensorboard (needs the tensorboard package)."
    )


def section_settings(section: str) -> dict[str, Setting]:
    """{key: Setting} of any section of a config file: `train` holds LoRATrainer's and its options
    nodes' settings, flat; `objective` TrainingObjective's."""
    if section in DATASET_SECTIONS:
        return settings_of(DatasetSettings)
    if section in ("train", "objective"):
        wanted = section == "objective"
        return {n: s for n, s in training_settings().items() if (s.info.group == "objective") == wanted}
    return settings_of(DECLARED[section])


# Sections whose keys are one declaration's fields: building it checks the values together, as the
# node does (`train` and `objective` together build LoRATrainer's TrainConfig).
DECLARED = {
    **{section: DatasetSettings for section in DATASET_SECTIONS},
    "model": ModelSource,
    "cache": CacheSettings,
    "sample": SamplerSettings,
    "save": SaveSettings,
    "logging": LoggingSettings,
}
