"""CacheLatents: DATASET + VAE + CLIP → TRAINING_DATA, encoded once and kept on disk."""

import os
from typing import Any

import folder_paths
from comfy.utils import ProgressBar
from comfy_api.latest import io

from ..settings import settings_of
from ..training.data.dataset import Dataset
from ..training.data.training_data import CacheSettings, build_training_data
from . import sockets
from .media_options import HOST_INPUT, media_values
from .setting_inputs import SettingValues, inputs_for
from .sockets import CATEGORY


def default_cache_folder():
    return os.path.join(folder_paths.get_output_directory(), "eridiffusion_cache")


class CacheLatents(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_CacheLatents",
            display_name="CacheLatents",
            category=CATEGORY,
            description="Encodes every image, clip and reference image with the graph's VAE and every caption "
            "with its CLIP, once (video, audio, edit and inpainting runs: CacheMediaOptions).",
            inputs=[
                sockets.Dataset.Input("dataset", tooltip="From LoadDataset."),
                io.Vae.Input(
                    "vae",
                    tooltip="The VAE of the model you train (encodes the images; clips need a video model's VAE).",
                ),
                io.Clip.Input("clip", tooltip="The text encoder of the model you train (encodes the captions)."),
                *inputs_for(settings_of(CacheSettings), ""),
                sockets.Dataset.Input(
                    "validation_dataset",
                    optional=True,
                    tooltip="A second LoadDataset of images never trained on (optional): LoRATrainer measures "
                    "the validation loss on them (beside any fraction LoadDataset held out).",
                ),
                sockets.Dataset.Input(
                    "regularization_dataset",
                    optional=True,
                    tooltip="Class images (optional; DreamBooth's prior preservation), from a second LoadDataset: "
                    "each training micro-batch comes with one of these, its loss weighted by TrainingExtras' "
                    "prior_weight, so the class keeps its look.",
                ),
                sockets.CacheMediaOptions.Input(
                    HOST_INPUT,
                    optional=True,
                    tooltip="From CacheMediaOptions (optional): inpainting, edit instructions, the image-to-video "
                    "start image, the clips' audio track.",
                ),
            ],
            outputs=[sockets.TrainingData.Output(display_name="training_data", tooltip="Latents and conditionings.")],
            hidden=[io.Hidden.unique_id],
        )

    @classmethod
    def execute(
        cls,
        dataset: Dataset,
        vae: Any,
        clip: Any,
        validation_dataset: Dataset | None = None,
        regularization_dataset: Dataset | None = None,
        media_options: SettingValues | None = None,
        **values: Any,
    ) -> io.NodeOutput:
        media = media_values(media_options)
        audio_vae, clip_vision = media.pop("audio_vae", None), media.pop("clip_vision", None)
        settings = CacheSettings(**values, **media)
        progress = ProgressBar(len(dataset.records), node_id=cls.hidden.unique_id)
        data = build_training_data(
            dataset,
            vae,
            clip,
            settings.resolution,
            settings.cache_folder.strip() or default_cache_folder(),
            shuffle_variants=settings.shuffle_variants,
            progress=lambda done, total: progress.update_absolute(done, total),
            validation_dataset=validation_dataset,
            regularization_dataset=regularization_dataset,
            start_image=settings.start_image,
            audio_vae=audio_vae,
            clip_vision=clip_vision,
            extra_resolutions=settings.extras(),
            edit_instructions=settings.edit_instructions,
            inpaint=settings.inpaint,
        )
        return io.NodeOutput(data)
