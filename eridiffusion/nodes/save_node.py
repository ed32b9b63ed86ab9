"""SaveLoRA: LORA → a ComfyUI-format .safetensors in models/loras."""

import os
from typing import Any

import folder_paths
from comfy_api.latest import io

from ..errors import EriDiffusionError
from ..formats.atomic_file import sweep_stale_temp_files
from ..formats.lora_file import SaveSettings, TrainedLoRA
from ..settings import settings_of
from . import sockets
from .setting_inputs import inputs_for
from .sockets import CATEGORY

# The longest ending a saved name gets: a counter for an existing name, and the extension.
_ENDING = "_00001.safetensors"


def _name_limit(folder):
    """The longest file name, in bytes, the file system under `folder` takes."""
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def lora_path_for(prefix, loras_dir, overwrite, what="SaveLoRA filename_prefix"):
    """The file for `prefix` inside `loras_dir`; refuses anything that would leave it, and names
    the file system cannot hold (errors name the input as `what`). Without `overwrite`, an existing
    name gets the next free `_NNNNN` suffix."""
    prefix = prefix.strip()
    if prefix.endswith(".safetensors"):
        prefix = prefix[: -len(".safetensors")]
    parts = prefix.replace("\\", "/").split("/")
    if not prefix or os.path.isabs(prefix) or any(p in ("", ".", "..") for p in parts):
        raise EriDiffusionError(
            f"{what} '{prefix}' must be a relative name inside models/{os.path.basename(loras_dir)} "
            "(like 'my_lora' or 'people/my_lora'), without '.' or '..' parts or a leading '/'."
        )
    if "\0" in prefix:
        raise EriDiffusionError(f"{what} {prefix!r} contains a NUL character; remove it.")
    limit = _name_limit(loras_dir)
    longest = max(len(p.encode()) for p in parts[:-1]) if len(parts) > 1 else 0
    if len(parts[-1].encode()) + len(_ENDING) > limit or longest > limit:
        raise EriDiffusionError(
            f"{what} '{prefix}' is too long for the file system, which takes "
            f"names of up to {limit} bytes: keep each folder name and the file name to "
            f"{limit - len(_ENDING)} bytes or less."
        )
    root = os.path.realpath(loras_dir)
    base = os.path.realpath(os.path.join(root, *parts))
    if os.path.commonpath([root, os.path.dirname(base)]) != root or base == root:
        raise EriDiffusionError(f"{what} '{prefix}' resolves outside {root}; use a plain relative name.")
    path = base + ".safetensors"
    counter = 1
    while not overwrite and os.path.exists(path):
        path = f"{base}_{counter:05}.safetensors"
        counter += 1
    return path


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
