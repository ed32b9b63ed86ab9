"""SaveLoRA: LORA → a ComfyUI-format .safetensors in models/loras."""
import os

import folder_paths
from comfy_api.latest import io

from ..training.errors import EriDiffusionError
from ..training.lora_format import SAVE_DTYPES
from .types import CATEGORY, LoRA


def lora_path_for(prefix, loras_dir, overwrite):
    """The file for `prefix` inside `loras_dir`; refuses anything that would leave it. Without
    `overwrite`, an existing name gets the next free `_NNNNN` suffix."""
    prefix = prefix.strip()
    if prefix.endswith(".safetensors"):
        prefix = prefix[:-len(".safetensors")]
    parts = prefix.replace("\\", "/").split("/")
    if not prefix or os.path.isabs(prefix) or ".." in parts or any(p == "" for p in parts):
        raise EriDiffusionError(f"SaveLoRA filename_prefix '{prefix}' must be a relative name inside models/loras "
                                "(like 'my_lora' or 'people/my_lora'), without '..' or a leading '/'.")
    root = os.path.realpath(loras_dir)
    base = os.path.realpath(os.path.join(root, *parts))
    if os.path.commonpath([root, base]) != root:
        raise EriDiffusionError(f"SaveLoRA filename_prefix '{prefix}' resolves outside {root}; use a plain relative name.")
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
            inputs=[
                LoRA.Input("lora", tooltip="From LoRATrainer."),
                io.String.Input("filename_prefix", default="eridiffusion/my_lora",
                                tooltip="Name inside models/loras (subfolders allowed)."),
                io.Combo.Input("dtype", options=list(SAVE_DTYPES), default="fp16",
                               tooltip="Precision of the saved weights."),
                io.Boolean.Input("overwrite", default=False,
                                 tooltip="Replace an existing file of that name (otherwise a number is appended)."),
            ],
            outputs=[io.String.Output(display_name="path", tooltip="The file written.")],
        )

    @classmethod
    def execute(cls, lora, filename_prefix, dtype, overwrite):
        loras_dir = folder_paths.get_folder_paths("loras")[0]
        path = lora_path_for(filename_prefix, loras_dir, overwrite)
        lora.save(path, dtype=dtype, overwrite=overwrite)
        name = os.path.relpath(path, loras_dir)
        return io.NodeOutput(path, ui={"text": [f"saved {name}"]})
