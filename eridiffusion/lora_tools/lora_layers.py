"""A LoRA file as the toolbox reads it: its layers grouped by key prefix, each layer's algorithm,
rank and alpha, a LoRA layer's weight change as a LowRank, and the checks every verb makes first."""

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import EriDiffusionError
from ..formats.layer_names import LayerTarget
from ..formats.lora_conventions import split_key
from ..formats.lora_file import SAVE_DTYPES, TrainedLoRA, tensor_groups
from ..settings import check_value
from .low_rank import LowRank
from .settings import WEIGHT

# A layer's algorithm, told by the tensor names it has (ComfyUI's weight adapters), first match wins.
_ALGORITHMS = (
    ("loha", ("hada_w1_a",)),
    ("lokr", ("lokr_w1", "lokr_w1_a")),
    ("oft", ("oft_blocks",)),
    ("glora", ("a1.weight",)),
    ("dora", ("dora_scale", "lora_magnitude_vector")),
    ("lora", ("lora_up.weight",)),
    ("diff", ("diff", "diff_b")),
)
# {ComfyUI tensor name ("lora_up.weight", "alpha" ...): tensor} of one layer of a LoRA file
LayerTensors = dict[str, torch.Tensor]
# (layer name in a file, the ComfyUI weight (rows) it changes, its tensors)
LayerPart = tuple[str, LayerTarget, LayerTensors]
# What resize and merge rewrite; `diff` layers (full weight changes: norms, biases) ride along.
LOW_RANK = "lora"


def layer_algorithm(group: LayerTensors) -> str:
    return next((name for name, marks in _ALGORITHMS if any(m in group for m in marks)), "unknown")


@dataclass
class LoRAFile:
    path: str
    layers: dict[str, LayerTensors]  # {key prefix: {tensor name: tensor}}
    metadata: dict[str, str]
    other_keys: list[str]  # keys that are no adapter tensor

    def algorithms(self) -> dict[str, int]:
        """{algorithm: layer count}, `diff` layers left out when others exist."""
        counts: dict[str, int] = {}
        for group in self.layers.values():
            name = layer_algorithm(group)
            counts[name] = counts.get(name, 0) + 1
        return {k: v for k, v in counts.items() if k != "diff" or len(counts) == 1}

    def dtype(self) -> torch.dtype:
        return next(iter(next(iter(self.layers.values())).values())).dtype


def check_input(path: str) -> None:
    if not os.path.isfile(path):
        where = "is a folder" if os.path.isdir(path) else "does not exist"
        raise EriDiffusionError(f"{path} {where}; give the path of a .safetensors file.")


def check_output(path: str, overwrite: bool) -> None:
    """Before any work: a folder or a name ComfyUI would not read as .safetensors is refused, an existing
    output unless `overwrite`."""
    if os.path.isdir(path):
        raise EriDiffusionError(f"{path} is a folder; give the output file's name.")
    if not path.lower().endswith(".safetensors"):
        raise EriDiffusionError(
            f"{path}: the output is written as .safetensors, which ComfyUI tells by the file's extension; "
            f"give a name ending in .safetensors (e.g. {os.path.splitext(path)[0]}.safetensors)."
        )
    if os.path.exists(path) and not overwrite:
        raise EriDiffusionError(f"{path} already exists; choose another name or pass --force to overwrite it.")


def safetensors_keys(path: str, what: str = "file") -> list[str]:
    """The keys of a .safetensors file (its header alone), or an EriDiffusionError naming it."""
    import safetensors

    check_input(path)
    try:
        with safetensors.safe_open(path, "pt") as f:
            return list(f.keys())
    except (safetensors.SafetensorError, OSError) as error:
        raise EriDiffusionError(
            f"{path} cannot be read as a .safetensors {what} ({error}); give a .safetensors file."
        ) from None


def read_safetensors(path: str, what: str = "file") -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, metadata) of a .safetensors file, or an EriDiffusionError naming it."""
    import safetensors
    import safetensors.torch

    check_input(path)
    try:
        with safetensors.safe_open(path, "pt") as f:
            metadata = f.metadata() or {}
        return safetensors.torch.load_file(path), metadata
    except (safetensors.SafetensorError, OSError) as error:
        raise EriDiffusionError(
            f"{path} cannot be read as a .safetensors {what} ({error}); give a .safetensors file."
        ) from None


def read_lora(path: str, other_trainers: bool = False) -> LoRAFile:
    """The LoRAFile of `path` in ComfyUI's tensor names; with `other_trainers`, other trainers' spellings
    (lora_A/lora_B, ...) are read too, as ComfyUI's names (for a report: the layer names stay theirs)."""
    tensors, metadata = read_safetensors(path, "LoRA")
    return lora_of(path, tensors, metadata, other_trainers)


def lora_of(
    path: str, tensors: dict[str, torch.Tensor], metadata: dict[str, str], other_trainers: bool = False
) -> LoRAFile:
    """The LoRAFile of a LoRA file's `tensors` and `metadata` (read_lora's; `path` names it in errors)."""
    if other_trainers:
        layers: dict[str, LayerTensors] = {}
        for key, tensor in tensors.items():
            split = split_key(key)
            if split:
                layers.setdefault(split[0], {})[split[1]] = tensor
        used = {k for k in tensors if split_key(k)}
    else:
        layers = tensor_groups(tensors)
        used = {f"{p}.{n}" for p, g in layers.items() for n in g}
    if not layers:
        example = next(iter(tensors), "no keys at all")
        raise EriDiffusionError(
            f"{path} is not a LoRA: none of its {len(tensors)} keys is a LoRA tensor (e.g. {example}); "
            "give a LoRA file (keys like <layer>.lora_up.weight / .lora_down.weight / .alpha)."
        )
    check_layers(path, layers)
    foreign = [k for k in tensors if k not in used and split_key(k)]
    if foreign:
        raise EriDiffusionError(
            f"{path} names its tensors as another trainer does ({len(foreign)} keys, e.g. {foreign[0]}); convert it "
            "to ComfyUI's keys first (eridiffusion lora convert, or the Convert LoRA node)."
        )
    return LoRAFile(path, layers, metadata, sorted(set(tensors) - used))


def check_layers(path: str, layers: dict[str, LayerTensors]) -> None:
    """Before any work: every tensor finite, each LoRA (or DoRA) layer with both lora_up and lora_down, of one
    rank, and its alpha one number above 0 (what ComfyUI's loader and the SVDs assume of a LoRA file). (A
    lone lora_down is no LoRA layer: the verbs name it as an unknown one.)"""
    damaged = "the file is damaged or was edited; re-save it from its trainer (or use an earlier save of the run)."
    for prefix, group in layers.items():
        for name, tensor in group.items():
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise EriDiffusionError(f"{path}: layer {prefix}'s {name} holds NaN or infinite values; {damaged}")
        missing = [name for name in ("lora_up", "lora_down") if f"{name}.weight" not in group]
        if missing and ("lora_up.weight" in group or "dora_scale" in group):  # read as a LoRA or DoRA layer
            present = "dora_scale" if "lora_up" in missing else "lora_up"
            raise EriDiffusionError(f"{path}: layer {prefix} has {present} without {' and '.join(missing)}; {damaged}")
        up, down = group.get("lora_up.weight"), group.get("lora_down.weight")
        if up is not None and down is not None and (up.dim() < 2 or down.dim() < 2 or up.shape[1] != down.shape[0]):
            raise EriDiffusionError(
                f"{path}: layer {prefix} has lora_up {tuple(up.shape)} and lora_down {tuple(down.shape)}, whose "
                f"ranks (lora_up's second size, lora_down's first) differ; {damaged}"
            )
        alpha = group.get("alpha")
        if alpha is not None and (alpha.numel() != 1 or not float(alpha.flatten()[0]) > 0):
            shown = tuple(alpha.shape) if alpha.numel() != 1 else f"{float(alpha):g}"
            raise EriDiffusionError(
                f"{path}: layer {prefix}'s alpha is {shown}, not one number above 0 (ComfyUI scales the layer by "
                f"alpha / rank); {damaged}"
            )


def check_weights(weighted: Iterable[tuple[Any, ...]], what: str) -> None:
    """Before any work: each (path, weight...) of `weighted` with finite weights within WEIGHT's bounds."""
    for path, *weights in weighted:
        if not all(math.isfinite(float(w)) for w in weights):
            shown = ", ".join(f"{float(w):g}" for w in weights)
            raise EriDiffusionError(
                f"{what}: {path} has weight {shown}, which is no finite number; give a number such as 0.8."
            )
        for weight in weights:
            check_value(WEIGHT, float(weight), f"{what}: the weight of {path}")


def rank_and_alpha(group: LayerTensors) -> tuple[int, float] | tuple[None, None]:
    """A LoRA-family layer's (rank, alpha); alpha is the rank where the file has none (scale 1)."""
    down = group.get("lora_down.weight")
    if down is None:
        return None, None
    rank = down.shape[0]
    alpha = group.get("alpha")  # (a PEFT-style file's layers have none: ComfyUI then scales by 1)
    return rank, float(alpha) if alpha is not None else float(rank)


def low_rank_of(group: LayerTensors, prefix: str, path: str) -> LowRank:
    """A LoRA layer's ΔW = scale · up @ down as a LowRank (the scale folded into up)."""
    if "lora_mid.weight" in group:
        raise EriDiffusionError(
            f"{path}: layer {prefix} is a Tucker-decomposed LoCon (lora_mid); only plain lora_up/lora_down "
            "layers (linear and conv) are supported."
        )
    up, down = group["lora_up.weight"].float(), group["lora_down.weight"].float()
    rank, alpha = rank_and_alpha(group)
    assert rank is not None and alpha is not None  # it has its lora_down (just read)
    shape = (up.shape[0], *down.shape[1:])
    return LowRank(up.reshape(up.shape[0], -1) * (alpha / rank), down.reshape(rank, -1), shape)


def lora_tensors(prefix: str, low_rank: LowRank, scale: float) -> dict[str, torch.Tensor]:
    """A LowRank as the file tensors of a LoRA layer whose ΔW is `scale` · up @ down (alpha = scale · rank)."""
    rank = low_rank.rank
    down = low_rank.down.reshape(rank, *low_rank.shape[1:])
    up = low_rank.up.reshape(low_rank.shape[0], rank, *([1] * (len(low_rank.shape) - 2)))
    return {
        f"{prefix}.lora_up.weight": up.contiguous(),
        f"{prefix}.lora_down.weight": down.contiguous(),
        f"{prefix}.alpha": torch.tensor(scale * rank),
    }


def dtype_name(dtype: torch.dtype) -> str:
    return next((name for name, d in SAVE_DTYPES.items() if d == dtype), "fp32")


def write_lora(
    path: str, tensors: dict[str, torch.Tensor], metadata: dict[str, str], dtype: str, overwrite: bool
) -> str:
    """Write atomically through SaveLoRA's writer (dtype conversion, the finite check, metadata)."""
    return TrainedLoRA(tensors, metadata).save(path, dtype=dtype, overwrite=overwrite)
