"""SaveLoRA: LORA → a ComfyUI-format .safetensors in models/loras."""

import os
from typing import Any

import folder_paths
from comfy_api.latest import io

from ..errors import EriDiffusionError
from ..formats.atomic_file import sweep_stale_temp_files
from ..formats.lora_file import SaveSettings, TrainedLoRA
from ..formats.lora_path import lora_path_for
from ..settings import settings_of
from . import sockets
from .setting_inputs import inputs_for
from .sockets import CATEGORY


class SaveLoRA(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_SaveLoRA",
            display_name="SaveLoRA",
            category=CATEGORY,
            description="Writes the LoRA where ComfyUI's LoraLoader lists it.",
            is_output_node=True,
            inputs=[sockets.LoRA.Input("lora", tooltip="From LoRATrainer."), *inputs_for(settings_of(SaveSettings))],
            outputs=[io.String.Output(display_name="path", tooltip="The file written.")],
        )

    @classmethod
    def validate_inputs(cls, filename_prefix: str | None = None) -> bool | str:
        """ComfyUI asks this when the prompt is queued, before any node runs: a prefix that would
        fail once the LoRA is trained is refused before the training starts."""
        if filename_prefix is None:  # (linked from another node: its value comes at run time)
            return True
        try:
            lora_path_for(filename_prefix, folder_paths.get_folder_paths("loras")[0], overwrite=True)
        except EriDiffusionError as error:
            return str(error)
        return True

    @classmethod
    def execute(cls, lora: TrainedLoRA | None, **values: Any) -> io.NodeOutput:
        settings = SaveSettings(**values)
        if lora is None:  # LoRATrainer's low_noise_lora of a run without a low_noise_model
            raise EriDiffusionError(
                "SaveLoRA's lora is empty: LoRATrainer's low_noise_lora holds an adapter only when its "
                "low_noise_model input is connected (Wan 2.2 14B's two experts). Connect it, or remove this SaveLoRA."
            )
        loras_dir = folder_paths.get_folder_paths("loras")[0]
        path = lora_path_for(settings.filename_prefix, loras_dir, settings.overwrite)
        sweep_stale_temp_files(os.path.dirname(path))
        lora.save(path, dtype=settings.dtype, overwrite=settings.overwrite)
        name = os.path.relpath(path, loras_dir)
        return io.NodeOutput(path, ui={"text": [f"saved {name}"]})
