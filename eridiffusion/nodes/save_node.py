"""SaveLoRA: what LoRATrainer trained → ComfyUI's folders (a LoRA in models/loras, a full fine-tune's diffusion
model in models/diffusion_models); SaveFineTune: a full fine-tune as a checkpoint with the graph's CLIP and VAE."""

import os
from typing import Any

import folder_paths
from comfy_api.latest import io

from ..errors import EriDiffusionError
from ..formats.atomic_file import sweep_stale_temp_files
from ..formats.checkpoint_file import SAVED_AS, FineTuneSaveSettings, checkpoint_of
from ..formats.lora_file import SaveSettings
from ..formats.lora_path import lora_path_for
from ..formats.model_file import DiffusionModelFile
from ..formats.trained_file import TrainedFile
from ..settings import settings_of
from . import sockets
from .setting_inputs import inputs_for
from .sockets import CATEGORY


def _prefix_refusal(filename_prefix: str | None, folder: str, what: str) -> bool | str:
    """validate_inputs' answer for a file name prefix inside ComfyUI's `folder` (True, or the refusal)."""
    if filename_prefix is None:  # (linked from another node: its value comes at run time)
        return True
    try:
        lora_path_for(filename_prefix, folder_paths.get_folder_paths(folder)[0], overwrite=True, what=what)
    except EriDiffusionError as error:
        return str(error)
    return True


def _write(file: TrainedFile, prefix: str, folder: str, dtype: str, overwrite: bool, what: str) -> io.NodeOutput:
    """Write `file` as `prefix` inside ComfyUI's `folder` (atomically, checked first); the node's output."""
    root = folder_paths.get_folder_paths(folder)[0]
    path = lora_path_for(prefix, root, overwrite, what=what)
    sweep_stale_temp_files(os.path.dirname(path))
    file.save(path, dtype=dtype, overwrite=overwrite)
    return io.NodeOutput(path, ui={"text": [f"saved {os.path.relpath(path, root)} in models/{folder}"]})


class SaveLoRA(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_SaveLoRA",
            display_name="SaveLoRA",
            category=CATEGORY,
            description="Writes the LoRA where ComfyUI's LoraLoader lists it (a full fine-tune, algorithm full: the "
            "diffusion model where UNETLoader lists it, models/diffusion_models).",
            is_output_node=True,
            inputs=[sockets.LoRA.Input("lora", tooltip="From LoRATrainer."), *inputs_for(settings_of(SaveSettings))],
            outputs=[io.String.Output(display_name="path", tooltip="The file written.")],
        )

    @classmethod
    def validate_inputs(cls, filename_prefix: str | None = None) -> bool | str:
        """ComfyUI asks this when the prompt is queued, before any node runs: a prefix that would
        fail once the LoRA is trained is refused before the training starts."""
        return _prefix_refusal(filename_prefix, "loras", "SaveLoRA filename_prefix")

    @classmethod
    def execute(cls, lora: TrainedFile | None, **values: Any) -> io.NodeOutput:
        settings = SaveSettings(**values)
        if lora is None:  # LoRATrainer's low_noise_lora of a run without a low_noise_model
            raise EriDiffusionError(
                "SaveLoRA's lora is empty: LoRATrainer's low_noise_lora holds an adapter only when its "
                "low_noise_model input is connected (Wan 2.2 14B's two experts). Connect it, or remove this SaveLoRA."
            )
        folder = "diffusion_models" if isinstance(lora, DiffusionModelFile) else "loras"
        what = "SaveLoRA filename_prefix"
        return _write(lora, settings.filename_prefix, folder, settings.dtype, settings.overwrite, what)


class SaveFineTune(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_SaveFineTune",
            display_name="SaveFineTune",
            category=CATEGORY,
            description="Writes a full fine-tune (LoRATrainer's algorithm full) as a checkpoint with the CLIP and VAE "
            "connected, where CheckpointLoaderSimple lists it, or as the diffusion model alone for UNETLoader.",
            is_output_node=True,
            inputs=[
                sockets.LoRA.Input("fine_tune", tooltip="LoRATrainer's lora output of a run with algorithm full."),
                io.Clip.Input("clip", optional=True, tooltip="The graph's CLIP, saved in the checkpoint."),
                io.Vae.Input("vae", optional=True, tooltip="The graph's VAE, saved in the checkpoint."),
                *inputs_for(settings_of(FineTuneSaveSettings)),
            ],
            outputs=[io.String.Output(display_name="path", tooltip="The file written.")],
        )

    @classmethod
    def validate_inputs(cls, filename_prefix: str | None = None, save_as: str | None = None) -> bool | str:
        """A prefix that would leave the folder is refused when the prompt is queued, before training."""
        return _prefix_refusal(filename_prefix, SAVED_AS.get(save_as or "checkpoint", "checkpoints"), "SaveFineTune")

    @classmethod
    def execute(cls, fine_tune: TrainedFile | None, clip: Any = None, vae: Any = None, **values: Any) -> io.NodeOutput:
        settings = FineTuneSaveSettings(**values)
        if not isinstance(fine_tune, DiffusionModelFile):
            raise EriDiffusionError(
                "SaveFineTune saves a full fine-tune, and its fine_tune input holds "
                f"{'nothing' if fine_tune is None else 'a ' + type(fine_tune).__name__}: set LoRATrainer's "
                "algorithm to full, or save the adapter with SaveLoRA."
            )
        file: TrainedFile = fine_tune
        if settings.save_as == "checkpoint":
            file = checkpoint_of(fine_tune, clip, vae)
        folder, what = SAVED_AS[settings.save_as], "SaveFineTune filename_prefix"
        return _write(file, settings.filename_prefix, folder, settings.dtype, settings.overwrite, what)
