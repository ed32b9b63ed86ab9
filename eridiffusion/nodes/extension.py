"""The list of nodes ComfyUI registers for EriDiffusion."""

from comfy_api.latest import ComfyExtension

from . import progress
from .cache_node import CacheLatents
from .dataset_node import LoadDataset
from .demo_model_node import TinyDemoModel
from .lora_tools_nodes import LORA_TOOL_NODES
from .loss_graph_node import LossGraph
from .media_options import MEDIA_OPTIONS_NODES
from .objective_node import TrainingObjective
from .options_nodes import OPTIONS_NODES
from .resume_node import LoadLoRAForTraining
from .sampling_node import SampleDuringTraining
from .save_node import SaveFineTune, SaveLoRA
from .trainer_node import LoRATrainer

NODES = [
    LoadDataset,
    CacheLatents,
    LoRATrainer,
    *OPTIONS_NODES,
    *MEDIA_OPTIONS_NODES,
    TrainingObjective,
    SampleDuringTraining,
    SaveLoRA,
    SaveFineTune,
    LossGraph,
    LoadLoRAForTraining,
    TinyDemoModel,
    *LORA_TOOL_NODES,
]


class EriDiffusionExtension(ComfyExtension):
    async def get_node_list(self):
        # ComfyUI 0.3.75 never calls on_load; every version calls this, before its web app starts.
        progress.register_routes_once()
        return list(NODES)
