"""`lora merge`: several LoRAs with weights into one, exactly (their ranks concatenated) or
compressed by SVD to a target rank (reporting what each layer keeps)."""

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import EriDiffusionError
from .incoming import check_one_naming, take_in
from .inspection import family_of
from .lora_layers import (
    LOW_RANK,
    LoRAFile,
    check_output,
    check_weights,
    dtype_name,
    layer_algorithm,
    lora_tensors,
    low_rank_of,
    write_lora,
)
from .low_rank import LowRank, spectrum_of_product
from .model_layout import WeightReader
from .peft_layers import as_peft
from .resize import LayerResult


@dataclass
class Result:
    path: str
    mode: str
    layers: list[LayerResult]  # rank_before: the concatenated rank
    read: list[str] = field(default_factory=list)  # what was read (converted or PEFT/diffusers files)

    def lines(self) -> list[str]:
        if not self.layers:
            return [f"wrote {self.path}: {self.mode} merge of full weight changes (diff) only, no low-rank layer"]
        ranks = [layer.rank_after for layer in self.layers]
        kept = [layer.kept_energy for layer in self.layers]
        out = [
            f"wrote {self.path}: {self.mode} merge, {len(self.layers)} layers, rank {min(ranks)}-{max(ranks)}, "
            f"kept energy (‖ΔW_r‖/‖ΔW‖) min {min(kept):.4f}"
        ]
        out += self.read
        if self.mode != "exact":
            out += [
                f"  {layer.prefix}: rank {layer.rank_before} -> {layer.rank_after}, keeps {layer.kept_energy:.4f}"
                for layer in self.layers
            ]
        return out


def _kind(lora: LoRAFile) -> str:
    kinds = set(lora.algorithms()) - {"diff"}
    return ", ".join(sorted(kinds)) or "diff"


# Key-guessed families (inspection.family_of) that one model's LoRAs may each show: a Flux.2 LoRA of its
# attention alone reads as Flux, an SDXL LoRA without text-encoder layers as SD1.x/SDXL UNet.
_SAME_MODEL = ({"Flux", "Flux.2"}, {"SDXL", "SD1.x/SDXL UNet"})


def _check_one_family(loras: list[LoRAFile]) -> None:
    """LoRAs whose layer names tell different model families apart (a Flux and an SDXL LoRA share no
    layer, so no shape check would stop their union) are refused."""
    families = {lora.path: family_of({}, lora.layers)[0] for lora in loras}
    known = {path: family for path, family in families.items() if family != "unknown"}
    groups = {
        next((frozenset(g) for g in _SAME_MODEL if family in g), frozenset({family})) for family in known.values()
    }
    if len(groups) > 1:
        listed = "; ".join(f"{path}: {family}" for path, family in known.items())
        raise EriDiffusionError(
            f"merge: the LoRAs are of different models by their layer names ({listed}); merge LoRAs of one model."
        )


def check_mergeable(loras: list[LoRAFile]) -> None:
    _check_one_family(loras)
    kinds = {lora.path: _kind(lora) for lora in loras}
    if len(set(kinds.values())) > 1:
        listed = "; ".join(f"{path}: {kind}" for path, kind in kinds.items())
        raise EriDiffusionError(
            f"merge mixes algorithms ({listed}); give LoRAs of one algorithm: merge handles "
            "LoRA/LoCon (lora_up/lora_down) files."
        )
    for lora in loras:
        if kinds[lora.path] not in (LOW_RANK, "diff"):
            raise EriDiffusionError(
                f"{lora.path} holds {kinds[lora.path]} layers; merge handles LoRA/LoCon (lora_up/lora_down) files."
            )
        if lora.other_keys:
            raise EriDiffusionError(
                f"{lora.path}: {len(lora.other_keys)} key(s) are no LoRA tensor (e.g. "
                f"{lora.other_keys[0]}) and would be lost; remove them first."
            )


def merge_loras(
    inputs: Sequence[tuple[str, float]],
    output: str,
    rank: int | None = None,
    dtype: str | None = None,
    overwrite: bool = False,
    model: Any = None,
    model_weights: WeightReader | None = None,
) -> Result:
    """Write `output`: the sum of weight · ΔW of each (path, weight) in `inputs`. Exact without `rank`
    (ranks concatenated, scale 1); with `rank`, each layer's sum cut to it by SVD. With ComfyUI model
    `model` (and its `model_weights` where it holds none), files in any trainer's format are converted to
    ComfyUI's keys for it first (incoming.py)."""
    if not inputs:
        raise EriDiffusionError("merge: give at least one LoRA file.")
    if rank is not None and rank < 1:
        raise EriDiffusionError(f"merge: rank {rank} is out of range; give a rank of 1 or more (or none for exact).")
    check_weights(inputs, "merge")
    check_output(output, overwrite)
    taken = [take_in(path, model, model_weights) for path, _ in inputs]
    peft = check_one_naming(taken, "merge")
    loras = [t.lora for t in taken]
    check_mergeable(loras)
    weights = [float(weight) for _, weight in inputs]
    tensors: dict[str, torch.Tensor] = {}
    results: list[LayerResult] = []
    for prefix in dict.fromkeys(p for lora in loras for p in lora.layers):
        present = [(lora, w) for lora, w in zip(loras, weights) if prefix in lora.layers]
        tensors.update(_merged_diffs(prefix, present))
        parts = [
            (low_rank_of(lora.layers[prefix], prefix, lora.path), w)
            for lora, w in present
            if layer_algorithm(lora.layers[prefix]) == LOW_RANK
        ]
        if not parts:
            continue
        _check_shapes(prefix, parts, present)
        joined = LowRank(
            torch.cat([p.up * w for p, w in parts], 1), torch.cat([p.down for p, _ in parts], 0), parts[0][0].shape
        )
        if rank is None:
            tensors.update(lora_tensors(prefix, joined, 1.0))
            results.append(LayerResult(prefix, joined.rank, joined.rank, 1.0))
            continue
        spectrum = spectrum_of_product(joined)
        kept_rank = min(rank, joined.rank, spectrum.size)
        tensors.update(lora_tensors(prefix, spectrum.truncated(kept_rank, 1.0), 1.0))
        results.append(LayerResult(prefix, joined.rank, kept_rank, spectrum.kept_energy(kept_rank)))
    metadata = _merged_metadata(loras, weights, rank, results)
    if peft:
        tensors, metadata = as_peft(tensors, metadata)
    write_lora(output, tensors, metadata, dtype or dtype_name(loras[0].dtype()), overwrite)
    read = [line for t in taken for line in t.read]
    return Result(output, "exact" if rank is None else f"rank {rank}", results, read)


def _merged_metadata(
    loras: list[LoRAFile], weights: list[float], rank: int | None, results: list[LayerResult]
) -> dict[str, str]:
    """The first file's metadata, what was merged, and its rank/alpha entries at the merged rank."""
    metadata = {
        **loras[0].metadata,
        "eridiffusion_merged": json.dumps(
            {"from": [[os.path.basename(lora.path), w] for lora, w in zip(loras, weights)], "rank": rank}
        ),
    }
    top = max((r.rank_after for r in results), default=0)
    for key in ("ss_network_dim", "eridiffusion_rank", "ss_network_alpha", "eridiffusion_alpha"):
        if key in metadata:
            metadata[key] = str(top)
    return metadata


def _merged_diffs(prefix: str, present: list[tuple[LoRAFile, float]]) -> dict[str, torch.Tensor]:
    """The weighted sum of full-weight changes (`diff`, `diff_b`) the layer has in any input."""
    sums: dict[str, torch.Tensor] = {}
    for lora, weight in present:
        for name in ("diff", "diff_b"):
            if name in lora.layers[prefix]:
                value = lora.layers[prefix][name].float() * weight
                sums[name] = sums[name] + value if name in sums else value
    return {f"{prefix}.{name}": value for name, value in sums.items()}


def _check_shapes(prefix: str, parts: list[tuple[LowRank, float]], present: list[tuple[LoRAFile, float]]) -> None:
    shapes = {p.shape for p, _ in parts}
    if len(shapes) > 1:
        paths = ", ".join(lora.path for lora, _ in present)
        raise EriDiffusionError(
            f"merge: layer {prefix} has different shapes {sorted(shapes)} in {paths}; "
            "the LoRAs were made for different models (or conv kernels); merge LoRAs of one model."
        )
