"""A model's layer layout without its weights, for the command line's verbs that need to know a model's
layers (convert): ComfyUI's own model class, as its detection picks it from a diffusion model's or
checkpoint's .safetensors header (ComfyUI's names, or diffusers' as its diffusion-model loader converts
them; a diffusers folder's unet/ or transformer/ files, sharded or not), built on the meta device (no
weight is read or allocated); or one of the built-in tiny demo stacks."""

import glob
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import EriDiffusionError
from .inspection import diffusion_model_names
from .lora_layers import check_input

if TYPE_CHECKING:
    import torch

TINY_LAYOUTS = {"tiny-sdxl": "sdxl", "tiny-sd15": "sd15"}
# safetensors' dtype names -> torch's (detection reads a few dtypes, e.g. of scaled fp8 files)
# weight key ("diffusion_model.<name>.weight") -> the model's weight, None where it is not at hand
WeightReader = Callable[[str], "torch.Tensor | None"]
_DTYPES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


# A diffusers model folder's weights: one file, shards (with their index), or a precision variant of either
_DIFFUSERS_WEIGHTS = (
    "diffusion_pytorch_model.safetensors",
    "diffusion_pytorch_model-*-of-*.safetensors",
    "diffusion_pytorch_model.*.safetensors",
)


def model_files(path: str) -> list[str]:
    """The .safetensors files holding the model `path` names: the file itself, or a diffusers folder's
    diffusion model (a pipeline folder's transformer/ or unet/, or a model folder: its one file, its
    shards, or else a precision variant's)."""
    if not os.path.isdir(path):
        check_input(path)
        return [path]
    folder = next(
        (os.path.join(path, c) for c in ("transformer", "unet") if os.path.isdir(os.path.join(path, c))), path
    )
    for pattern in _DIFFUSERS_WEIGHTS:
        files = sorted(glob.glob(os.path.join(glob.escape(folder), pattern)))
        variants = sorted({os.path.basename(f).split(".")[1].split("-")[0] for f in files})
        if len(variants) > 1:
            raise EriDiffusionError(
                f"{folder} holds the model in several precisions ({', '.join(variants)}); give one of its files."
            )
        if files:
            return files
    raise EriDiffusionError(
        f"{path} is a folder without a diffusers diffusion model (transformer/ or unet/ with "
        "diffusion_pytorch_model.safetensors, or its shards); give that folder, or a .safetensors model file."
    )


def model_layout(path: str) -> Any:
    """The ComfyUI model (a BaseModel, on the meta device) of the diffusion model or checkpoint file `path`
    (or diffusers folder), or of a built-in tiny stack (tiny-sdxl, tiny-sd15)."""
    if path in TINY_LAYOUTS:
        from ..tiny_models import build_tiny_demo

        return build_tiny_demo(TINY_LAYOUTS[path], seed=0)[0].model
    import safetensors

    shapes = {}
    for file in model_files(path):
        try:
            with safetensors.safe_open(file, "pt") as f:
                shapes.update({k: (tuple(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()) for k in f.keys()})
        except (safetensors.SafetensorError, OSError) as error:
            raise EriDiffusionError(
                f"{file} cannot be read as a .safetensors model ({error}); give a diffusion model or checkpoint file."
            ) from None
    return layout_from_shapes(shapes, path)


def layout_from_shapes(shapes: dict[str, tuple[tuple[int, ...], str]], what: str) -> Any:
    """The ComfyUI model of a state dict given as {key: (shape, safetensors dtype name)}, on the meta device."""
    import comfy.model_detection
    import torch

    inside = diffusion_model_names(list(shapes))
    state_dict = {
        name: torch.empty(shapes[key][0], dtype=getattr(torch, _DTYPES.get(shapes[key][1], "float32")), device="meta")
        for name, key in inside.items()
    }
    try:
        config = comfy.model_detection.model_config_from_unet(state_dict, "")
        if config is None:  # a diffusers-format file, as comfy.sd.load_diffusion_model reads it
            state_dict, config = _from_diffusers(state_dict)
        if config is None:
            raise ValueError("its detection matches no model class, in ComfyUI's names or diffusers'")
        with torch.device("meta"):
            return config.get_model(state_dict, "")
    except Exception as error:  # detection and model classes raise many types for a layout they do not know
        raise EriDiffusionError(
            f"{what}: ComfyUI does not recognise the diffusion model in this file ({type(error).__name__}: "
            f"{error}); give the diffusion model or checkpoint the LoRA was trained for."
        ) from None


def _from_diffusers(state_dict: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """(state dict in ComfyUI's names, model config) of a diffusion model saved in diffusers' names, as
    comfy.sd.load_diffusion_model_state_dict converts one: a transformer (Flux, SD3, Z-Image, AuraFlow,
    PixArt: its q, k, v fused as ComfyUI holds them), else a UNet of a known configuration; (…, None) when
    neither."""
    import comfy.model_detection
    import comfy.utils

    converted = comfy.model_detection.convert_diffusers_mmdit(dict(state_dict), "")
    if converted is not None:
        return converted, comfy.model_detection.model_config_from_unet(converted, "")
    config = comfy.model_detection.model_config_from_diffusers_unet(state_dict)
    if config is None:
        return state_dict, None
    names = comfy.utils.unet_to_diffusers(config.unet_config)  # {diffusers name: ComfyUI's}
    return {names[k]: v for k, v in state_dict.items() if k in names}, config


def weight_reader(path: str) -> WeightReader | None:
    """weight key ("diffusion_model.<name>.weight") -> that weight, read from the file `path` on demand
    (None for a built-in tiny stack, whose layout holds its weights)."""
    if path in TINY_LAYOUTS:
        return None
    import safetensors

    def read(key: str) -> "torch.Tensor | None":
        inside = key[len("diffusion_model.") :]
        for file in model_files(path):
            with safetensors.safe_open(file, "pt") as f:
                names = diffusion_model_names(list(f.keys()))
                if inside in names:
                    return f.get_tensor(names[inside])
        return None

    return read
