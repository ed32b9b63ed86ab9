"""`lora resize`: each LoRA/LoCon layer cut by SVD to a fixed rank, or to the smallest rank that keeps
a share of its weight change; reports what each layer keeps. A DoRA layer's low-rank part is cut the
same way and its magnitudes (dora_scale) kept: W' = (W + ΔW_r) · m / ‖W + ΔW_r‖."""

import json
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import EriDiffusionError
from .incoming import Incoming, take_in
from .lora_layers import (
    LOW_RANK,
    LoRAFile,
    check_output,
    dtype_name,
    layer_algorithm,
    lora_tensors,
    low_rank_of,
    rank_and_alpha,
    write_lora,
)
from .low_rank import check_rank_and_energy, spectrum_of_product
from .model_layout import WeightReader
from .peft_layers import as_peft

SUPPORTED = "resize handles LoRA, LoCon and DoRA files (lora_up/lora_down layers, linear and conv)"
RESIZABLE = (LOW_RANK, "dora")


@dataclass
class LayerResult:
    prefix: str
    rank_before: int
    rank_after: int
    kept_energy: float  # ‖ΔW_r‖_F / ‖ΔW‖_F


@dataclass
class Result:
    path: str
    layers: list[LayerResult]
    read: list[str] = field(default_factory=list)  # what was read (a converted or PEFT/diffusers file)

    def lines(self) -> list[str]:
        kept = [layer.kept_energy for layer in self.layers]
        ranks = [layer.rank_after for layer in self.layers]
        out = [
            f"wrote {self.path}: {len(self.layers)} layers, rank {min(ranks)}-{max(ranks)}, "
            f"kept energy (‖ΔW_r‖/‖ΔW‖) min {min(kept):.4f} mean {sum(kept) / len(kept):.4f}"
        ]
        out += self.read
        out += [
            f"  {layer.prefix}: rank {layer.rank_before} -> {layer.rank_after}, keeps {layer.kept_energy:.4f}"
            for layer in self.layers
        ]
        return out


def check_resizable(lora: LoRAFile) -> None:
    others = {name: n for name, n in lora.algorithms().items() if name not in (*RESIZABLE, "diff")}
    if "unknown" in others:
        prefix, group = next((p, g) for p, g in lora.layers.items() if layer_algorithm(g) == "unknown")
        raise EriDiffusionError(
            f"{lora.path}: layer {prefix} holds only {', '.join(sorted(group))}, no LoRA pair (lora_up and "
            f"lora_down, or lora_B and lora_A; {others['unknown']} such layers); the file is damaged or was "
            "edited: re-save it from its trainer."
        )
    if others:
        listed = ", ".join(f"{name} ({n} layers)" for name, n in others.items())
        raise EriDiffusionError(
            f"{lora.path} holds {listed}; {SUPPORTED}. LoKr, LoHa, OFT and GLoRA layers have no rank to cut by SVD."
        )
    if not any(layer_algorithm(group) in RESIZABLE for group in lora.layers.values()):
        raise EriDiffusionError(
            f"{lora.path} holds no low-rank layer to resize, only full weight changes (diff); {SUPPORTED}."
        )
    if lora.other_keys:
        raise EriDiffusionError(
            f"{lora.path}: {len(lora.other_keys)} key(s) are no LoRA tensor (e.g. "
            f"{lora.other_keys[0]}) and would be lost; remove them first."
        )


def _check_rank_and_kind(taken: Incoming, rank: int | None, path: str) -> None:
    lora = taken.lora
    if taken.peft and "dora" in lora.algorithms():
        raise EriDiffusionError(
            f"{lora.path} is a PEFT DoRA file, whose magnitudes depend on the base model's weights; give the model "
            "(--model, or the node's MODEL input) and it is converted to ComfyUI's keys on the way in."
        )
    largest = max(rank_and_alpha(g)[0] or 0 for g in lora.layers.values())
    if rank is not None and rank > largest:
        raise EriDiffusionError(
            f"resize {path}: rank {rank} is out of range; its layers have rank {largest} at most, "
            f"so give a rank from 1 to {largest}."
        )


def resize_lora(
    path: str,
    output: str,
    rank: int | None = None,
    energy: float | None = None,
    dtype: str | None = None,
    overwrite: bool = False,
    model: Any = None,
    weights: WeightReader | None = None,
) -> Result:
    """Write `output`: `path`'s LoRA layers at `rank` (layers already smaller keep theirs) or at the
    smallest rank keeping `energy` of each layer's ‖ΔW‖_F. `diff` tensors are copied. With ComfyUI model
    `model` (and its `weights` where it holds none), a file in any trainer's format is converted to
    ComfyUI's keys for it first (incoming.py)."""
    check_rank_and_energy(rank, energy, f"resize {path}")
    check_output(output, overwrite)
    taken = take_in(path, model, weights)
    lora = taken.lora
    check_resizable(lora)
    _check_rank_and_kind(taken, rank, path)
    tensors: dict[str, torch.Tensor] = {}
    results: list[LayerResult] = []
    for prefix, group in lora.layers.items():
        if layer_algorithm(group) not in RESIZABLE:
            tensors.update({f"{prefix}.{name}": t for name, t in group.items()})
            continue
        spectrum = spectrum_of_product(low_rank_of(group, prefix, path))
        old_rank, alpha = rank_and_alpha(group)
        assert old_rank is not None and alpha is not None  # low_rank_of read its lora_down
        if rank is not None:
            new_rank = min(rank, old_rank, spectrum.size)
        else:
            assert energy is not None  # check_rank_and_energy: one of them
            new_rank = spectrum.rank_for(energy)
        scale = alpha / old_rank
        tensors.update(lora_tensors(prefix, spectrum.truncated(new_rank, scale), scale))
        tensors.update(
            {f"{prefix}.{n}": t for n, t in group.items() if n not in ("lora_up.weight", "lora_down.weight", "alpha")}
        )
        results.append(LayerResult(prefix, old_rank, new_rank, spectrum.kept_energy(new_rank)))
    top = max(r.rank_after for r in results)
    metadata = {
        **lora.metadata,
        "eridiffusion_resized": json.dumps({"from": os.path.basename(lora.path), "rank": rank, "energy": energy}),
    }
    for key in ("ss_network_dim", "eridiffusion_rank"):
        if key in metadata:
            metadata[key] = str(top)
    if taken.peft:
        tensors, metadata = as_peft(tensors, metadata)
    write_lora(output, tensors, metadata, dtype or dtype_name(lora.dtype()), overwrite)
    return Result(output, results, taken.read)
