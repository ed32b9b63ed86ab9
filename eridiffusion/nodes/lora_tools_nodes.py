"""The LoRA toolbox as nodes (EriDiffusion/LoRA): inspect, convert, resize, merge, merge into a
checkpoint, extract. Each reads its files from and writes them into ComfyUI's model folders, calls the
toolbox's core (eridiffusion/lora_tools) and shows what it did on the node."""

import os
from typing import Any

import folder_paths
from comfy_api.latest import io

from ..errors import EriDiffusionError
from ..formats.lora_path import lora_path_for
from ..lora_tools import settings as tool_settings
from ..settings import settings_of
from .setting_inputs import inputs_for
from .sockets import CATEGORY

LORA_CATEGORY = f"{CATEGORY}/LoRA"
_PATH_TIP = "The file written (a full path: link it to another LoRA node's lora input)."
_MODEL_OUT_TIP = "The input MODEL with the written LoRA applied at strength 1, as LoraLoader applies it."


def lora_file(name, what):
    """The full path of LoRA `name` (inside models/loras, or a full path); a missing one is named."""
    name = name.strip()
    if os.path.isabs(name) and os.path.isfile(name):
        return name
    path = folder_paths.get_full_path("loras", name) or folder_paths.get_full_path("loras", name + ".safetensors")
    if path is None:
        raise EriDiffusionError(
            f"{what}: {name!r} is no file in models/loras nor a full path of one; give a name LoraLoader lists."
        )
    return path


def output_file(prefix, overwrite, node, folder="loras"):
    target = folder_paths.get_folder_paths(folder)[0]
    return lora_path_for(prefix, target, overwrite, what=f"{node} output")


def with_lora(model, path):
    """A clone of `model` with LoRA file `path` applied at strength 1 (LoraLoader's load)."""
    import comfy.sd
    import comfy.utils

    return comfy.sd.load_lora_for_models(model, None, comfy.utils.load_torch_file(path), 1.0, 0)[0]


def file_writer_schema(node_id, display_name, description, settings):
    """The schema of a node that writes a LoRA from files: `settings`' inputs, an optional MODEL, and
    the file written with that MODEL with it applied."""
    return io.Schema(
        node_id=node_id,
        display_name=display_name,
        category=LORA_CATEGORY,
        description=description,
        is_output_node=True,
        inputs=[
            *inputs_for(settings_of(settings)),
            io.Model.Input(
                "model",
                optional=True,
                tooltip="Optional: the model the LoRAs are for. Files in any trainer's format are converted to "
                "ComfyUI's keys for it on the way in (the result is in ComfyUI's keys), and it is returned with "
                "the written LoRA applied.",
            ),
        ],
        outputs=[
            io.String.Output(display_name="lora", tooltip=_PATH_TIP),
            io.Model.Output(display_name="model", tooltip=_MODEL_OUT_TIP + " (None without a MODEL)."),
        ],
    )


def shown(lines, *outputs):
    return io.NodeOutput(*outputs, ui={"text": ["\n".join(lines)]})


class InspectLoRA(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_InspectLoRA",
            display_name="Inspect LoRA",
            category=LORA_CATEGORY,
            description="Keys, family, algorithm, rank and alpha per block, metadata; with a MODEL, the keys it "
            "would not load.",
            is_output_node=True,
            inputs=[
                *inputs_for(settings_of(tool_settings.InspectSettings)),
                io.Model.Input("model", optional=True, tooltip="Also list the LoRA's keys this MODEL would not load."),
            ],
            outputs=[io.String.Output(display_name="report", tooltip="The report, as the node shows it.")],
        )

    @classmethod
    def execute(cls, lora: str, model: Any = None) -> io.NodeOutput:
        from ..formats.layer_names import layer_table
        from ..lora_tools.inspection import inspect_lora, model_key_map

        path = lora_file(lora, "Inspect LoRA lora")
        report = inspect_lora(path, model_key_map(model), layer_table(model.model)) if model else inspect_lora(path)
        return shown(report.lines(), "\n".join(report.lines()))


class ConvertLoRA(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_ConvertLoRA",
            display_name="Convert LoRA",
            category=LORA_CATEGORY,
            description="Another trainer's LoRA (ai-toolkit, diffusers/PEFT, kohya, musubi-tuner, OneTrainer, "
            "SimpleTuner) to ComfyUI's keys for the MODEL, or to diffusers/PEFT's keys.",
            is_output_node=True,
            inputs=[
                io.Model.Input("model", tooltip="The model the LoRA is for: its layers name the keys."),
                *inputs_for(settings_of(tool_settings.ConvertSettings)),
            ],
            outputs=[
                io.String.Output(display_name="lora", tooltip=_PATH_TIP),
                io.Model.Output(display_name="model", tooltip=_MODEL_OUT_TIP + " (the input MODEL for peft)."),
            ],
        )

    @classmethod
    def execute(cls, model: Any, **values: Any) -> io.NodeOutput:
        from ..lora_tools.convert import convert_lora

        s = tool_settings.ConvertSettings(**values)
        source = lora_file(s.lora, "Convert LoRA lora")
        result = convert_lora(
            source, output_file(s.output, s.overwrite, "Convert LoRA"), model.model, s.to, None, s.overwrite
        )
        return shown(result.lines(), result.path, with_lora(model, result.path) if s.to == "comfyui" else model)


class ResizeLoRA(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return file_writer_schema(
            "EriDiffusion_ResizeLoRA",
            "Resize LoRA",
            "Each layer cut by SVD to a rank, or to the smallest rank keeping an energy share; shows what each keeps.",
            tool_settings.ResizeSettings,
        )

    @classmethod
    def execute(cls, model: Any = None, **values: Any) -> io.NodeOutput:
        from ..lora_tools.resize import resize_lora

        s = tool_settings.ResizeSettings(**values)
        rank, energy = tool_settings.rank_or_energy(s)
        source = lora_file(s.lora, "Resize LoRA lora")
        output = output_file(s.output, s.overwrite, "Resize LoRA")
        result = resize_lora(
            source, output, rank, energy, None, s.overwrite, model.model if model is not None else None
        )
        return shown(result.lines(), result.path, with_lora(model, result.path) if model is not None else None)


class MergeLoRAs(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return file_writer_schema(
            "EriDiffusion_MergeLoRAs",
            "Merge LoRAs",
            "Several LoRAs with weights into one: exact (ranks concatenated) or compressed by SVD to a rank.",
            tool_settings.MergeSettings,
        )

    @classmethod
    def execute(cls, model: Any = None, **values: Any) -> io.NodeOutput:
        from ..lora_tools.merge import merge_loras

        s = tool_settings.MergeSettings(**values)
        inputs = [
            (lora_file(n, "Merge LoRAs loras"), w) for n, w in tool_settings.weighted_lines(s.loras, "Merge LoRAs")
        ]
        output = output_file(s.output, s.overwrite, "Merge LoRAs")
        result = merge_loras(
            inputs, output, s.rank or None, None, s.overwrite, model.model if model is not None else None
        )
        return shown(result.lines(), result.path, with_lora(model, result.path) if model is not None else None)


class MergeLoRAIntoCheckpoint(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_MergeLoRAIntoCheckpoint",
            display_name="Merge LoRA into checkpoint",
            category=LORA_CATEGORY,
            description="The LoRAs applied to the MODEL and CLIP, saved with the VAE as one checkpoint through "
            "ComfyUI's own checkpoint save (CheckpointLoaderSimple lists it).",
            is_output_node=True,
            inputs=[
                io.Model.Input("model", tooltip="The model to merge into; it is not changed."),
                io.Clip.Input("clip", optional=True, tooltip="Optional: its text encoder, with the LoRAs' CLIP part."),
                io.Vae.Input("vae", optional=True, tooltip="Optional: saved in the checkpoint as it is."),
                *inputs_for(settings_of(tool_settings.MergeIntoCheckpointSettings)),
            ],
            outputs=[io.String.Output(display_name="checkpoint", tooltip="The checkpoint written (a full path).")],
        )

    @classmethod
    def execute(cls, model: Any, clip: Any = None, vae: Any = None, **values: Any) -> io.NodeOutput:
        from ..lora_tools.checkpoint import merge_into_checkpoint

        s = tool_settings.MergeIntoCheckpointSettings(**values)
        named = tool_settings.weighted_lines(s.loras, "Merge LoRA into checkpoint")
        loras = [(lora_file(n, "Merge LoRA into checkpoint loras"), w, w) for n, w in named]
        output = output_file(s.output, s.overwrite, "Merge LoRA into checkpoint", folder="checkpoints")
        result = merge_into_checkpoint(model, clip, vae, loras, output, s.overwrite)
        return shown(result.lines(), result.path)


class ExtractLoRA(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_ExtractLoRA",
            display_name="Extract LoRA",
            category=LORA_CATEGORY,
            description="A fine-tuned MODEL's difference to its base, per layer by SVD, as a LoRA at a rank or "
            "an energy share.",
            is_output_node=True,
            inputs=[
                io.Model.Input("base", tooltip="The base model."),
                io.Model.Input("tuned", tooltip="The fine-tuned model (a LoRA applied to the base counts too)."),
                *inputs_for(settings_of(tool_settings.ExtractSettings)),
            ],
            outputs=[
                io.String.Output(display_name="lora", tooltip=_PATH_TIP),
                io.Model.Output(display_name="model", tooltip="The base MODEL with the extracted LoRA applied."),
            ],
        )

    @classmethod
    def execute(cls, base: Any, tuned: Any, **values: Any) -> io.NodeOutput:
        from ..lora_tools.extract import extract_from_models

        s = tool_settings.ExtractSettings(**values)
        rank, energy = tool_settings.rank_or_energy(s)
        output = output_file(s.output, s.overwrite, "Extract LoRA")
        result = extract_from_models(base, tuned, output, rank, energy, s.dtype, str(base.load_device), s.overwrite)
        return shown(result.lines(), result.path, with_lora(base, result.path))


LORA_TOOL_NODES = [InspectLoRA, ConvertLoRA, ResizeLoRA, MergeLoRAs, MergeLoRAIntoCheckpoint, ExtractLoRA]
