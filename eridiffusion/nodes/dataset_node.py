"""LoadDataset: a folder of captioned images, video clips or edit pairs → DATASET."""

import os
from typing import Any

import folder_paths
from comfy_api.latest import io

from ..settings import settings_of
from ..training.adapters.preload import preload_adapter_library
from ..training.data.dataset import dataset_of
from ..training.data.dataset_settings import DatasetSettings
from . import sockets
from .media_options import HOST_INPUT, media_values
from .setting_inputs import SettingValues, inputs_for
from .sockets import CATEGORY


def resolve_dataset_folder(folder):
    """An absolute path as given; a relative one under ComfyUI's input folder."""
    folder = os.path.expanduser(folder.strip())
    return folder if os.path.isabs(folder) else os.path.join(folder_paths.get_input_directory(), folder)


class LoadDataset(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_LoadDataset",
            display_name="LoadDataset",
            category=CATEGORY,
            description="Reads a folder of images, video clips or frame folders with same-name caption files "
            "(or a metadata.jsonl); a control/ subfolder makes it an edit-pair dataset, a masks/ subfolder "
            "gives each image a loss mask.",
            inputs=[
                *inputs_for(settings_of(DatasetSettings), ""),
                sockets.DatasetMediaOptions.Input(
                    HOST_INPUT,
                    optional=True,
                    tooltip="From DatasetMediaOptions (optional; video clips and audio files: frames, fps, seconds).",
                ),
            ],
            outputs=[sockets.Dataset.Output(display_name="dataset", tooltip="The images and their captions.")],
        )

    @classmethod
    def execute(cls, media_options: SettingValues | None = None, **values: Any) -> io.NodeOutput:
        settings = DatasetSettings(**values, **media_values(media_options))
        preload_adapter_library()  # (a training graph starts here: LyCORIS loads while the next nodes run)
        return io.NodeOutput(dataset_of(settings, resolve_dataset_folder(settings.folder)))
