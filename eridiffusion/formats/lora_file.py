"""ComfyUI's LoRA file format: which key names address which weights, the tensors and
metadata of a saved adapter, and writing the .safetensors file."""

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import torch

from .. import __version__
from ..settings import check_settings, setting
from .trained_file import SAVE_DTYPES, TrainedFile


@dataclass(frozen=True)
class SaveSettings:
    """SaveLoRA's inputs (and a config file's `save:` section)."""

    filename_prefix: str = setting("eridiffusion/my_lora", "Name inside models/loras (subfolders allowed).")
    dtype: str = setting("fp16", "Precision of the saved weights.", choices=tuple(SAVE_DTYPES))
    overwrite: bool = setting(False, "Replace an existing file of that name (otherwise a number is appended).")

    def __post_init__(self) -> None:
        check_settings(self, "SaveLoRA")


def loadable_weight_keys(base_model: Any) -> dict[str, str]:
    """{model weight key: key prefix in a LoRA file} for every weight ComfyUI's LoraLoader can
    address, read from ComfyUI's own key map. Prefers kohya's `lora_unet_…` naming (what
    sd-scripts writes for SDXL), else the generic `diffusion_model.…` one."""
    import comfy.lora  # (the host's model zoo: not imported to read SaveLoRA's settings)

    key_map = comfy.lora.model_lora_keys_unet(base_model, {})
    prefixes: dict[str, str] = {}
    for lora_key, weight_key in key_map.items():
        if not isinstance(weight_key, str) or not weight_key.endswith(".weight"):
            continue
        native = weight_key[len("diffusion_model.") : -len(".weight")]
        kohya = "lora_unet_" + native.replace(".", "_")
        if key_map.get(kohya) == weight_key:
            prefixes[weight_key] = kohya
        elif key_map.get(weight_key[: -len(".weight")]) == weight_key:
            prefixes[weight_key] = weight_key[: -len(".weight")]
        else:
            prefixes.setdefault(weight_key, lora_key)
    return prefixes


def loadable_clip_keys(cond_stage_model: Any) -> dict[str, str]:
    """{CLIP weight key: key prefix in a LoRA file} for the text-encoder weights ComfyUI's
    LoraLoader addresses: kohya's `lora_te_…` (SD1.x), `lora_te1_…`/`lora_te2_…` (SDXL) for the CLIP
    encoders, else the generic `text_encoders.<weight key>` every ComfyUI maps (the host's kohya-style
    names for a lone LLM encoder, `lora_te_layers_…`, exist in 0.28 and not in older hosts, and name no
    encoder)."""
    import comfy.lora

    key_map = comfy.lora.model_lora_keys_clip(cond_stage_model, {})
    two_encoders = any(k.startswith("clip_g.") for k in cond_stage_model.state_dict())
    preferred = ("lora_te1_", "lora_te2_") if two_encoders else ("lora_te_",)
    prefixes: dict[str, str] = {}
    for lora_key, weight_key in key_map.items():
        kohya = lora_key.startswith(preferred) and weight_key.startswith("clip_")
        if kohya or (lora_key.startswith("text_encoders.") and weight_key not in prefixes):
            if weight_key not in prefixes or not prefixes[weight_key].startswith(preferred):
                prefixes[weight_key] = lora_key
    return prefixes


@dataclass
class TrainedLoRA(TrainedFile):
    """What SaveLoRA writes: tensors under ComfyUI's names (fp32, CPU) and the metadata."""

    what = "LoRA"

    def kept_as_is(self, key: str, tensor: torch.Tensor) -> bool:
        return key.endswith(".alpha") or super().kept_as_is(key, tensor)


def run_metadata(base_model: Any, config: Any, data: Any, steps: int) -> dict[str, str]:
    """The metadata a run adds to its files: version, architecture, steps, dataset and settings (`base_model`: a
    BaseModel, `config`: a TrainConfig, `data`: a TrainingData)."""
    return {
        "eridiffusion_version": __version__,
        "architecture": type(base_model.model_config).__name__,
        "steps": str(steps),
        "dataset_hash": data.dataset_fingerprint,
        "resolution": str(data.resolution),
        "training_config": json.dumps(config.as_dict()),
    }


# LyCORIS's own name of an algorithm, where it differs from ours (kohya's `algo` network argument).
LYCORIS_ALGO = {"oft": "diag-oft"}


def export_lora(
    adapter_set: Any,
    prefixes: dict[str, str],
    metadata: dict[str, str],
    text_encoder: tuple[Any, dict[str, str]] | None = None,
) -> TrainedLoRA:
    """Collect an AdapterSet's tensors under the file prefixes of its layers; `text_encoder` is
    an optional (AdapterSet, prefixes) pair of text-encoder adapters saved in the same file."""
    tensors: dict[str, torch.Tensor] = {}
    for adapters, names in [(adapter_set, prefixes)] + ([text_encoder] if text_encoder else []):
        for layer, adapter in adapters.items():
            prefix = names[f"{layer}.weight"]
            for name, tensor in adapter.saved_tensors().items():
                tensors[f"{prefix}.{name}"] = tensor.detach().to("cpu", torch.float32).clone()
    spec = adapter_set.spec
    meta = {
        # kohya's keys, read by tools that list LoRA info
        "ss_network_module": "networks.lora" if spec.algorithm == "lora" else "lycoris.kohya",
        "ss_network_dim": str(spec.rank),
        "ss_network_alpha": str(spec.alpha),
        "ss_network_args": json.dumps(
            {
                "algo": LYCORIS_ALGO.get(spec.algorithm, spec.algorithm),
                "conv_dim": spec.conv_rank,
                "conv_alpha": spec.conv_alpha,
                "factor": spec.lokr_factor,
            }
        ),
        "eridiffusion_adapter_spec": json.dumps(dataclasses.asdict(spec)),
        "eridiffusion_adapter": spec.algorithm,
        "eridiffusion_rank": str(spec.rank),
        "eridiffusion_alpha": str(spec.alpha),
        "eridiffusion_targets": spec.targets,
        # the adapted layers, by their names in the model (the text encoder's under their own key)
        "eridiffusion_modules": json.dumps(list(adapter_set.layer_names)),
    }
    if text_encoder:
        meta["eridiffusion_text_encoder_modules"] = json.dumps(list(text_encoder[0].layer_names))
    meta.update(metadata)
    return TrainedLoRA(tensors, meta)


# Names an adapter's tensors have in a file, after the layer prefix (ComfyUI's names).
TENSOR_NAMES = (
    "lora_up.weight",
    "lora_down.weight",
    "lora_mid.weight",
    "alpha",
    "dora_scale",
    "hada_w1_a",
    "hada_w1_b",
    "hada_w2_a",
    "hada_w2_b",
    "hada_t1",
    "hada_t2",
    "lokr_w1",
    "lokr_w1_a",
    "lokr_w1_b",
    "lokr_w2",
    "lokr_w2_a",
    "lokr_w2_b",
    "lokr_t2",
    "oft_blocks",
    "rescale",
    "a1.weight",
    "a2.weight",
    "b1.weight",
    "b2.weight",
    "bm.weight",
    "diff",
    "diff_b",
)


def tensor_groups(tensors: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """{layer prefix: {tensor name: tensor}} of a LoRA file's tensors (`<prefix>.lora_down.weight`
    ...); keys that are no adapter tensor are left out."""
    groups: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        name = next((n for n in TENSOR_NAMES if key.endswith("." + n)), None)
        if name:
            groups.setdefault(key[: -len(name) - 1], {})[name] = tensor
    return groups
