"""What each section of a config file may hold. A node's section holds that node's inputs, with
the names, types, defaults and bounds read from the node definition itself, so the file and the
graph cannot drift apart; `model` and `logging` hold what no node does. Import once ComfyUI is on
sys.path."""

import difflib
import math
from dataclasses import dataclass

from ..errors import EriDiffusionError

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
# Node inputs that name a folder: a relative one is taken from the config file that sets it.
FOLDER_INPUTS = {(section, "folder") for section in DATASET_SECTIONS} | {("cache", "cache_folder")}
WIDGET_KINDS = ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")


@dataclass(frozen=True)
class Setting:
    """One key of a section: kind (a node widget type, or PATH / PATHS for model files)."""

    name: str
    kind: str
    default: object
    options: tuple = ()
    low: float = None
    high: float = None
    multiline: bool = False
    help: str = ""

    def checked(self, value, key):
        """`value` as this setting takes it; an EriDiffusionError naming `key` when it does not fit."""
        if self.kind == "BOOLEAN":
            if not isinstance(value, bool):
                raise EriDiffusionError(f"{key} must be true or false (got {value!r}).")
            return value
        if self.kind in ("INT", "FLOAT"):
            is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not is_number or (self.kind == "INT" and not float(value).is_integer()) or not math.isfinite(value):
                raise EriDiffusionError(
                    f"{key} must be {'a whole number' if self.kind == 'INT' else 'a number'} (got {value!r})."
                )
            value = int(value) if self.kind == "INT" else float(value)
            if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
                raise EriDiffusionError(f"{key} is {value:g}, outside {self.low:g}..{self.high:g}.")
            return value
        if self.kind == "COMBO":
            if value not in self.options:
                raise EriDiffusionError(
                    f"{key} is {value!r}; choose one of {', '.join(map(str, self.options))}"
                    f"{nearest_hint(str(value), [str(o) for o in self.options])}."
                )
            return value
        if self.kind == "PATHS":
            values = [value] if isinstance(value, str) else value
            if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) and v for v in values):
                raise EriDiffusionError(f"{key} must be a file path or a list of file paths (got {value!r}).")
            return tuple(values)
        if self.multiline and isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return "\n".join(value)  # one line each: a YAML list of prompts
        if not isinstance(value, str):
            raise EriDiffusionError(f"{key} must be text (got {value!r}); quote it in the YAML file.")
        return value


def nearest_hint(word, known):
    """'; did you mean X?' for the known word closest to `word`, or '' when none is close."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.5)
    return f"; did you mean {close[0]}?" if close else ""


def node_settings(node_class):
    """{input name: Setting} of a node's widget inputs (sockets left out), from its definition:
    the one place the known keys of a node's section and their defaults come from."""
    definition = node_class.INPUT_TYPES()
    settings = {}
    for group in ("required", "optional"):
        for name, spec in definition.get(group, {}).items():
            kind, options = spec[0], (spec[1] if len(spec) > 1 else {})
            if isinstance(kind, (list, tuple)):  # the older combo form: the options as the type
                kind, options = "COMBO", {**options, "options": list(kind)}
            if kind not in WIDGET_KINDS:
                continue
            choices = tuple(options.get("options", ()))
            default = options.get("default", choices[0] if choices else None)
            settings[name] = Setting(
                name,
                kind,
                default,
                choices,
                options.get("min"),
                options.get("max"),
                bool(options.get("multiline")),
                options.get("tooltip", ""),
            )
    return settings


def section_nodes():
    """{section: the node classes whose inputs it holds} of the node sections: `train` holds
    LoRATrainer's and its options nodes' (AdapterOptions, OptimizerOptions, ...), flat."""
    from ..nodes.cache_node import CacheLatents
    from ..nodes.dataset_node import LoadDataset
    from ..nodes.objective_node import TrainingObjective
    from ..nodes.options_nodes import OPTIONS_NODES
    from ..nodes.sampling_node import SampleDuringTraining
    from ..nodes.save_node import SaveLoRA
    from ..nodes.trainer_node import LoRATrainer

    return {
        "dataset": (LoadDataset,),
        "cache": (CacheLatents,),
        "train": (LoRATrainer, *OPTIONS_NODES),
        "objective": (TrainingObjective,),
        "sample": (SampleDuringTraining,),
        "save": (SaveLoRA,),
        "validation_dataset": (LoadDataset,),
        "regularization_dataset": (LoadDataset,),
    }


def model_settings():
    """The `model` section: one checkpoint file, or a diffusion model + text encoders + VAE (a
    checkpoint's text encoders or VAE can be replaced the same way), loaded as ComfyUI's loader
    nodes load them; the choices come from those loaders."""
    import comfy.sd
    import nodes

    weight_dtypes = tuple(nodes.UNETLoader.INPUT_TYPES()["required"]["weight_dtype"][0])
    clip_types = tuple(t.name.lower() for t in comfy.sd.CLIPType)
    return {
        s.name: s
        for s in (
            Setting(
                "checkpoint",
                "PATH",
                "",
                help="One .safetensors file with model, text encoders and VAE "
                "(CheckpointLoaderSimple), or tiny-sdxl / tiny-sd15.",
            ),
            Setting("diffusion_model", "PATH", "", help="The diffusion model file alone (UNETLoader)."),
            Setting(
                "weight_dtype",
                "COMBO",
                "default",
                weight_dtypes,
                help="Storage type of the diffusion model's weights, as UNETLoader's weight_dtype.",
            ),
            Setting("text_encoders", "PATHS", (), help="Text encoder files (CLIPLoader, DualCLIPLoader, ...)."),
            Setting(
                "clip_type",
                "COMBO",
                "stable_diffusion",
                clip_types,
                help="What the text encoder files are for, as CLIPLoader's type (flux, sd3, wan, ...).",
            ),
            Setting("vae", "PATH", "", help="The VAE file (VAELoader)."),
            Setting(
                "arch",
                "STRING",
                "",
                help="Optional: the family the files must be (sdxl, flux, sd3, wan21, ... "
                "or ComfyUI's class name); another family is an error.",
            ),
        )
    }


LOGGING_SETTINGS = {
    "tensorboard": Setting(
        "tensorboard",
        "BOOLEAN",
        False,
        help="Write TensorBoard event files to output/<run>/tensorboard (needs the tensorboard package).",
    )
}


def section_settings(section):
    """{key: Setting} of any section of a config file."""
    if section == "model":
        return model_settings()
    if section == "logging":
        return LOGGING_SETTINGS
    settings = {}
    for node in section_nodes()[section]:
        settings.update(node_settings(node))
    return settings
