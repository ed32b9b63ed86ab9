"""TrainingObjective: timestep sampling, loss weighting, noise offset and guidance for LoRATrainer."""

from comfy_api.latest import io

from ..training.run.config import training_settings
from .setting_inputs import SettingValues, inputs_for
from .types import CATEGORY, Objective


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
            outputs=[Objective.Output(display_name="objective", tooltip="Connect to LoRATrainer.")],
        )

    @classmethod
    def execute(cls, **values):
        return io.NodeOutput(SettingValues(values))
