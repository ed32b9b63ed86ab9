"""LoadLoRAForTraining: a saved checkpoint (and its training state) → RESUME for LoRATrainer."""

import os
from typing import Any

import folder_paths
from comfy_api.latest import io

from ..formats.state_file import state_path
from ..settings import settings_of
from ..training.run.resume import ResumeSettings, load_resume_point
from . import sockets
from .setting_inputs import inputs_for
from .sockets import CATEGORY


def resolve_checkpoint(path):
    """An absolute path as given; a relative one in ComfyUI's output folder, else in models/loras."""
    path = os.path.expanduser(path.strip())
    if os.path.isabs(path):
        return path
    for folder in (folder_paths.get_output_directory(), *folder_paths.get_folder_paths("loras")):
        candidate = os.path.join(folder, path)
        if os.path.exists(candidate):
            return candidate
    return os.path.join(folder_paths.get_output_directory(), path)


class LoadLoRAForTraining(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_LoadLoRAForTraining",
            display_name="LoadLoRAForTraining",
            category=CATEGORY,
            description="Continue a run from one of its checkpoints, or keep training any LoRA/DoRA file.",
            inputs=inputs_for(settings_of(ResumeSettings)),
            outputs=[sockets.Resume.Output(display_name="resume", tooltip="Connect to LoRATrainer's resume input.")],
        )

    @classmethod
    def execute(cls, **values: Any) -> io.NodeOutput:
        point = load_resume_point(resolve_checkpoint(ResumeSettings(**values).path))
        found = "with" if point.state is not None else "without"
        return io.NodeOutput(
            point,
            ui={
                "text": [
                    f"{point.spec.algorithm} rank {point.spec.rank}, {found} "
                    f"training state ({os.path.basename(state_path(point.path))})"
                ]
            },
        )
