"""TrainingObjective: timestep sampling, loss weighting, noise offset and guidance for LoRATrainer, and
the low-noise expert of a two-expert run (its boundary being an objective setting)."""

from dataclasses import dataclass
from typing import Any

from comfy_api.latest import io

from ..training.run.config import training_settings
from . import sockets
from .setting_inputs import SettingValues, inputs_for
from .sockets import CATEGORY


@dataclass(frozen=True)
class ObjectiveValues(SettingValues):
    """TrainingObjective's settings, and the low-noise expert's MODEL when one is connected."""

    low_noise_model: Any = None


class TrainingObjective(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_TrainingObjective",
            display_name="TrainingObjective",
            category=CATEGORY,
            description="How noise levels are drawn and the loss weighted (without this node: the model "
            "family's defaults, see the README's support table).",
            inputs=[
                *inputs_for(training_settings(), "objective"),
                io.Model.Input(
                    "low_noise_model",
                    optional=True,
                    tooltip="Two experts in one run (optional; Wan 2.2 14B): the low-noise model, LoRATrainer's "
                    "`model` being the high-noise one. Each step trains the expert whose noise range the step's "
                    "noise level falls in (expert_boundary, switch_boundary_every); both are returned and saved.",
                ),
            ],
            outputs=[sockets.Objective.Output(display_name="objective", tooltip="Connect to LoRATrainer.")],
        )

    @classmethod
    def execute(cls, low_noise_model: Any = None, **values: Any) -> io.NodeOutput:
        return io.NodeOutput(ObjectiveValues(values, low_noise_model))
