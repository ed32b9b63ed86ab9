"""Continuing from a saved adapter: LoadLoRAForTraining's RESUME point, read from one of our
checkpoints (with its training state beside it the run continues exactly where it stopped) or from
any trainer's plain LoRA/DoRA file (a new run from its weights)."""

import json
import os
from dataclasses import dataclass

import safetensors
import torch

from ...errors import EriDiffusionError, first_line
from ...formats.lora_file import loadable_clip_keys, loadable_weight_keys, tensor_groups
from ...formats.model_file import TRAINED_KIND
from ...formats.state_file import STATE_SUFFIX, load_state, pickled_state_path, state_path
from ...settings import check_settings, setting
from ..adapters import AdapterSpec
from .run_state import check_state


@dataclass(frozen=True)
class ResumeSettings:
    """LoadLoRAForTraining's input."""

    path: str = setting(
        "eridiffusion_lora/checkpoints/eridiffusion_lora_step000500.safetensors",
        "A .safetensors checkpoint; relative paths look in ComfyUI's output "
        "folder, then in models/loras. Its .training_state beside it makes the "
        "continuation exact.",
    )

    def __post_init__(self):
        check_settings(self, "LoadLoRAForTraining")


@dataclass
class ResumePoint:
    """A saved adapter to continue from, and its training state when there is one."""

    path: str
    tensors: dict
    spec: AdapterSpec
    state: dict | None = None
    kind: str = "adapters"  # what the run that wrote it trained: "adapters", or "weights" (a whole diffusion model)


def _spec_from_metadata(text, path):
    """The AdapterSpec our metadata entry `eridiffusion_adapter_spec` holds; a named error when it is
    not the JSON of one (edited, or written by something else)."""
    try:
        fields = json.loads(text)
        if not isinstance(fields, dict):
            raise TypeError(f"a {type(fields).__name__}, not a mapping")
        return AdapterSpec(**fields)
    except (ValueError, TypeError, RecursionError) as error:  # (EriDiffusionError: a field out of bounds)
        reason = first_line(error)
        raise EriDiffusionError(
            f"{path}: its metadata entry eridiffusion_adapter_spec is not an adapter's settings ({reason}); the "
            "file was edited or written by another tool. Resume from another checkpoint, or remove that entry "
            "to continue from its weights as a plain LoRA."
        ) from None


def _spec_from_tensors(tensors, path):
    """The spec of a plain LoRA file written by another tool: algorithm and rank from its keys."""
    downs = [t for k, t in tensors.items() if k.endswith(".lora_down.weight")]
    if downs and not any(k.endswith((".hada_w1_a", ".lokr_w1", ".lokr_w1_a")) for k in tensors):
        rank = downs[0].shape[0]
        alphas = [float(t) for k, t in tensors.items() if k.endswith(".alpha")]
        algorithm = "dora" if any(k.endswith(".dora_scale") for k in tensors) else "lora"
        return AdapterSpec(
            algorithm=algorithm, rank=rank, alpha=alphas[0] if alphas else float(rank), targets="all-linear"
        )
    raise EriDiffusionError(
        f"{path}: not a LoRA/DoRA file EriDiffusion can continue from (LoHa and LoKr files "
        "resume only when EriDiffusion wrote them). Start a new run instead."
    )


def load_resume_point(path):
    """Read an adapter file (and its state file if present) for LoRATrainer to continue from."""
    if path.endswith(STATE_SUFFIX):
        adapter = path[: -len(STATE_SUFFIX)] + ".safetensors"
        raise EriDiffusionError(
            f"{path} is the training state of {adapter}; give the adapter file, and its state beside it is read too."
        )
    if os.path.isdir(path):
        raise EriDiffusionError(
            f"resume file {path} is a folder; give the path of a .safetensors checkpoint in it "
            "(runs write them to output/<run_name>/checkpoints/)."
        )
    if not os.path.isfile(path):
        raise EriDiffusionError(
            f"resume file {path} does not exist; give the path of a .safetensors checkpoint "
            "(runs write them to output/<run_name>/checkpoints/)."
        )
    # ComfyUI runs nodes under inference_mode; tensors made there can never be updated in place
    # (the optimizer's state is), so everything is read outside it.
    with torch.inference_mode(False):
        try:
            with safetensors.safe_open(path, "pt") as f:
                metadata = f.metadata() or {}
                tensors = {k: f.get_tensor(k).clone() for k in f.keys()}
        except Exception as error:  # safetensors raises several types for a damaged file
            raise EriDiffusionError(
                f"{path} cannot be read as a .safetensors file ({error}); pick another checkpoint."
            ) from None
        non_finite = sorted(k for k, t in tensors.items() if not bool(torch.isfinite(t).all()))
        if non_finite:
            raise EriDiffusionError(
                f"{path} holds NaN or infinite values ({len(non_finite)} of its {len(tensors)} "
                f"tensors, e.g. {non_finite[0]}): it was saved from a diverged run. Resume from "
                "an earlier checkpoint."
            )
        if "eridiffusion_adapter_spec" in metadata:
            spec = _spec_from_metadata(metadata["eridiffusion_adapter_spec"], path)
        else:
            spec = _spec_from_tensors(tensors, path)
        state = None
        if os.path.isfile(state_path(path)):
            state = check_state(load_state(state_path(path), path), state_path(path), path)
        elif os.path.exists(pickled_state_path(path)):
            raise EriDiffusionError(
                f"{pickled_state_path(path)} is a training state in the pickle format of earlier EriDiffusion "
                "versions, which is never opened (a pickle can run any code). To continue from "
                f"{os.path.basename(path)}'s weights as a new run, move {os.path.basename(pickled_state_path(path))} "
                "away; to continue a run exactly, resume from a checkpoint written by this version."
            )
    return ResumePoint(path, tensors, spec, state, kind=metadata.get(TRAINED_KIND, "adapters"))


def check_resume_fits(point, model, clip, config):
    """A ResumePoint whose weights the run could not load onto ComfyUI's MODEL `model` (and `clip`,
    trained when TrainConfig `config` has text_encoder_lr > 0): layers this model lacks (a LoRA of
    another model) or shapes of another model's. Asked as soon as the model is loaded, before any
    image is encoded; None passes."""
    if point is None:
        return
    if point.kind == "weights":
        check_model_file_fits(point, model)
        return
    layers = {prefix: (model.model, key) for key, prefix in loadable_weight_keys(model.model).items()}
    if clip is not None and config.text_encoder_lr > 0:
        encoder = clip.cond_stage_model
        layers.update({prefix: (encoder, key) for key, prefix in loadable_clip_keys(encoder).items()})
    groups = tensor_groups(point.tensors)
    grouped = {f"{prefix}.{name}" for prefix, group in groups.items() for name in group}
    foreign = sorted([p for p in groups if p not in layers] + [k for k in point.tensors if k not in grouped])
    if foreign:
        raise EriDiffusionError(
            f"{point.path} holds weights for layers this run does not train ({len(foreign)}, e.g. {foreign[0]}): "
            "a LoRA of another model, or text-encoder weights (those resume only with the CLIP connected and "
            "text_encoder_lr > 0). Resume from a checkpoint of this model, or start a new run."
        )
    check_layers_fit_what_trains(point.path, [p for p in groups if layers[p][0] is model.model], bool(groups), config)
    for prefix, group in sorted(groups.items()):
        module, key = layers[prefix]
        weight = module.get_parameter(key)
        down, up = group.get("lora_down.weight"), group.get("lora_up.weight")
        if down is None or up is None:  # LoHa/LoKr: their factors are checked as they load
            continue
        if down.shape[1] != weight.shape[1] or up.shape[0] != weight.shape[0]:
            raise EriDiffusionError(
                f"{point.path}: the weights for {prefix} (up {tuple(up.shape)}, down {tuple(down.shape)}) do not "
                f"fit this model's layer of shape {tuple(weight.shape)}: it was trained on another model. Resume "
                "from a checkpoint of this model, or start a new run."
            )


def check_model_file_fits(point, model):
    """A diffusion model file of a weights run whose tensors are not the MODEL's (names and shapes)."""
    own = {k: tuple(v.shape) for k, v in model.model.diffusion_model.state_dict().items()}
    saved = {k: tuple(v.shape) for k, v in point.tensors.items()}
    odd = sorted(k for k in own.keys() | saved.keys() if own.get(k) != saved.get(k))
    if odd:
        raise EriDiffusionError(
            f"{point.path} is a diffusion model whose tensors differ from this MODEL's ({len(odd)}, e.g. {odd[0]}: "
            f"{saved.get(odd[0])} in the file, {own.get(odd[0])} in the MODEL): it was trained on another model. "
            "Resume from a checkpoint of this model, or start a new run."
        )


def check_layers_fit_what_trains(path, diffusion_layers, any_layers, config):
    """A resume file's layers against train_diffusion_model: the diffusion model's layers continue only
    with it on, and with it on a file of the text encoders' layers alone would leave it without adapters."""
    if diffusion_layers and not config.adapter.train_diffusion_model:
        raise EriDiffusionError(
            f"{path} holds diffusion-model weights (e.g. {diffusion_layers[0]}), and train_diffusion_model is off: "
            "turn it on to continue them, or resume from a file of the text encoders alone."
        )
    if any_layers and not diffusion_layers and config.adapter.train_diffusion_model:
        raise EriDiffusionError(
            f"{path} holds text-encoder weights alone, so the diffusion model would train no adapter: turn "
            "train_diffusion_model off to continue the text encoders alone, or start a new run."
        )
