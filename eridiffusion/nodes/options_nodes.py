"""The small optional nodes that feed LoRATrainer the settings users change less often (adapter
shape, optimizer and schedule, memory and speed, checkpoints, validation, EMA and the loss's
extras), so the trainer's own face holds only the essentials. Each input is a training setting
(training/run/config.py) with its default; a node left out means those defaults."""

from typing import Any

from comfy_api.latest import io

from ..errors import EriDiffusionError
from ..settings import check_value
from ..training.adapters.layer_selection import parse_block_lr
from ..training.run.config import training_settings
from . import sockets
from .setting_inputs import SettingValues, inputs_for
from .sockets import CATEGORY


class TrainerOptionsNode(io.ComfyNode):
    """Base of the options nodes: the training settings of GROUP become the inputs, their values the output."""

    NODE_ID = DISPLAY_NAME = DESCRIPTION = ""
    SOCKET = None  # the io.Custom type LoRATrainer takes it as
    TRAINER_INPUT = ""  # LoRATrainer's input for it
    GROUP = ""  # the training settings of this group (their `group`) are its inputs

    @classmethod
    def inputs(cls) -> list:
        """The node's inputs: the training settings of GROUP."""
        return inputs_for(training_settings(), cls.GROUP)

    @classmethod
    def feeds(cls) -> str:
        """The input its output connects to, for the output's tooltip."""
        return f"LoRATrainer's {cls.TRAINER_INPUT}"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id=cls.NODE_ID,
            display_name=cls.DISPLAY_NAME,
            category=f"{CATEGORY}/options",
            description=cls.DESCRIPTION,
            inputs=cls.inputs(),
            outputs=[cls.SOCKET.Output(display_name="options", tooltip=f"Connect to {cls.feeds()}.")],
        )

    @classmethod
    def execute(cls, **values: Any) -> io.NodeOutput:
        return io.NodeOutput(SettingValues(values))

    @classmethod
    def refusal(cls, **values: Any) -> bool | str:
        """For a validate_inputs: True, or why the first of `values` its setting's declaration refuses (None: a
        value not given here, which the trainer checks with the rest)."""
        settings = training_settings()
        for name, value in values.items():
            if value is None:
                continue
            try:
                check_value(settings[name], value, f"{cls.DISPLAY_NAME}: {name}")
            except EriDiffusionError as error:
                return str(error)
        return True


class AdapterOptionsNode(TrainerOptionsNode):
    NODE_ID, DISPLAY_NAME = "EriDiffusion_AdapterOptions", "AdapterOptions"
    DESCRIPTION = (
        "Which layers get adapters (preset, then include/exclude patterns on their names), conv adapters "
        "(LoCon) and LoKr's factors, for LoRATrainer."
    )
    GROUP = "adapter"
    SOCKET, TRAINER_INPUT = sockets.AdapterOptions, "adapter_options"

    @classmethod
    def validate_inputs(cls, include: str | None = None, exclude: str | None = None) -> bool | str:
        """ComfyUI asks this when the prompt is queued, before any node runs: a pattern that is no regular
        expression is flagged on this node, not found once the model has loaded."""
        return cls.refusal(include=include, exclude=exclude)


class OptimizerOptionsNode(TrainerOptionsNode):
    NODE_ID, DISPLAY_NAME = "EriDiffusion_OptimizerOptions", "OptimizerOptions"
    DESCRIPTION = (
        "The optimizer, learning-rate schedule, gradient accumulation, text-encoder rate and per-block rates, "
        "for LoRATrainer."
    )
    GROUP = "optimizer"
    SOCKET, TRAINER_INPUT = sockets.OptimizerOptions, "optimizer_options"

    @classmethod
    def validate_inputs(cls, block_lr: str | None = None) -> bool | str:
        """ComfyUI asks this when the prompt is queued, before any node runs: per-block rates that do not
        parse are flagged on this node."""
        try:
            parse_block_lr(block_lr or "")
        except EriDiffusionError as error:
            return f"{cls.DISPLAY_NAME}: {error}"
        return True


class MemoryOptionsNode(TrainerOptionsNode):
    NODE_ID, DISPLAY_NAME = "EriDiffusion_MemoryOptions", "MemoryOptions"
    DESCRIPTION = (
        "Memory and speed: gradient checkpointing, streamed weights, torch.compile, CUDA graphs, fp8 compute, "
        "the GPU that trains, and the VRAM budget (the model's blocks that do not fit swapped in from CPU memory)."
    )
    GROUP = "memory"
    SOCKET, TRAINER_INPUT = sockets.MemoryOptions, "memory_options"


class CheckpointOptionsNode(TrainerOptionsNode):
    NODE_ID, DISPLAY_NAME = "EriDiffusion_CheckpointOptions", "CheckpointOptions"
    DESCRIPTION = "Which checkpoints a run keeps, and what it does when the loss turns NaN."
    GROUP = "checkpoint"
    SOCKET, TRAINER_INPUT = sockets.CheckpointOptions, "checkpoint_options"


class ValidationOptionsNode(TrainerOptionsNode):
    NODE_ID, DISPLAY_NAME = "EriDiffusion_ValidationOptions", "ValidationOptions"
    DESCRIPTION = (
        "How often the validation loss is measured (on LoadDataset's held-out images or CacheLatents' "
        "validation_dataset) and when a run that stopped improving ends."
    )
    GROUP = "validation"
    SOCKET, TRAINER_INPUT = sockets.ValidationOptions, "validation_options"


class TrainingExtrasNode(TrainerOptionsNode):
    NODE_ID, DISPLAY_NAME = "EriDiffusion_TrainingExtras", "TrainingExtras"
    DESCRIPTION = (
        "An EMA of the adapter weights; the loss weight outside masks; prior preservation (the weight of "
        "regularization images, and differential output preservation of a class phrase)."
    )
    GROUP = "extras"
    SOCKET, TRAINER_INPUT = sockets.TrainingExtras, "training_extras"


OPTIONS_NODES = (
    AdapterOptionsNode,
    OptimizerOptionsNode,
    MemoryOptionsNode,
    CheckpointOptionsNode,
    ValidationOptionsNode,
    TrainingExtrasNode,
)
