"""TrainingObjective: timestep sampling, loss weighting, noise offset and guidance for LoRATrainer."""

from typing import Any

from comfy_api.latest import io

from ..training.run.config import training_settings
from . import sockets
from .setting_inputs import SettingValues, inputs_for
from .sockets import CATEGORY


class TrainingObjective(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_TrainingObjective",
            display_name="TrainingObjective",
            category=CATEGORY,
            description="How noise levels are drawn and the loss weighted (without this node: the model "
            "family's defaults, see the README's support table).",
            inputs=inputs_for(training_settings(), "objective"),
            outputs=[sockets.Objective.Output(display_name="objective", tooltip="Connect to LoRATrainer.")],
        )

    @classmethod
    def execute(cls, **values: Any) -> io.NodeOutput:
        return io.NodeOutput(SettingValues(values))
