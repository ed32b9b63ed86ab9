"""`lora extract`: the weight difference of a fine-tuned model against its base, per layer by SVD, as
a LoRA at a rank or at the smallest rank keeping an energy share; from two .safetensors files of
diffusion-model weights or from two ComfyUI MODELs."""

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import EriDiffusionError
from .inspection import diffusion_model_names
from .lora_layers import check_output, lora_tensors, safetensors_keys, write_lora
from .low_rank import check_rank_and_energy, spectrum_of_matrix
from .resize import LayerResult


@dataclass
class Result:
    path: str
    layers: list[LayerResult]  # rank_before is the layer's full rank bound min(out, in)
    full_diffs: list[str]  # keys of 1-D weights and biases saved whole (`diff`, `diff_b`)
    skipped: list[str]  # names that differ but no LoRA key addresses
    unchanged: int

    def lines(self) -> list[str]:
        kept = [layer.kept_energy for layer in self.layers]
        ranks = [layer.rank_after for layer in self.layers]
        as_lora = (
            f"{len(self.layers)} layers as LoRA (rank {min(ranks)}-{max(ranks)}, kept energy (‖ΔW_r‖/‖ΔW‖) min "
            f"{min(kept):.4f} mean {sum(kept) / len(kept):.4f})"
            if self.layers
            else "no layer as LoRA"
        )
        out = [
            f"wrote {self.path}: {as_lora}, {len(self.full_diffs)} saved whole (norms, biases), "
            f"{self.unchanged} unchanged"
        ]
        out += [f"  {layer.prefix}: rank {layer.rank_after}, keeps {layer.kept_energy:.4f}" for layer in self.layers]
        if self.skipped:
            out.append(
                f"  not saved: {len(self.skipped)} changed tensor(s) no LoRA key addresses, e.g. {self.skipped[0]}"
            )
        return out


def extract_from_files(
    base_path: str,
    tuned_path: str,
    output: str,
    rank: int | None = None,
    energy: float | None = None,
    dtype: str = "fp16",
    device: str = "cpu",
    overwrite: bool = False,
) -> Result:
    """A LoRA of `tuned_path` - `base_path` (diffusion-model weights in ComfyUI's names, bare or under a
    checkpoint's `model.diffusion_model.`), keyed `diffusion_model.<layer>` (ComfyUI's generic form)."""
    import safetensors

    check_rank_and_energy(rank, energy, "extract")
    check_device(device)
    check_output(output, overwrite)
    for path in (base_path, tuned_path):
        safetensors_keys(path, "model")
    with safetensors.safe_open(base_path, "pt") as base, safetensors.safe_open(tuned_path, "pt") as tuned:
        base_names, tuned_names = diffusion_model_names(list(base.keys())), diffusion_model_names(list(tuned.keys()))
        _check_same_names(base_path, tuned_path, base_names, tuned_names)
        pairs = ((name, base.get_tensor(base_names[name]), tuned.get_tensor(tuned_names[name])) for name in base_names)
        prefix_of = lambda name: "diffusion_model." + name[: -len(".weight")]  # noqa: E731
        result = _extract(pairs, prefix_of, rank, energy, device, (base_path, tuned_path))
    return _write(
        result,
        output,
        {"base": os.path.basename(base_path), "tuned": os.path.basename(tuned_path)},
        rank,
        energy,
        dtype,
        overwrite,
    )


def extract_from_models(
    base: Any,
    tuned: Any,
    output: str,
    rank: int | None = None,
    energy: float | None = None,
    dtype: str = "fp16",
    device: str = "cpu",
    overwrite: bool = False,
) -> Result:
    """A LoRA of MODEL `tuned` - MODEL `base` (ComfyUI patchers; LoRAs loaded on either count), in the
    keys SaveLoRA writes for that model."""
    import comfy.lora

    from ..comfy_compat import patched_diffusion_weights
    from ..formats.lora_file import loadable_weight_keys

    check_rank_and_energy(rank, energy, "extract")
    check_device(device)
    check_output(output, overwrite)
    base_weights = patched_diffusion_weights(base)
    tuned_weights = patched_diffusion_weights(tuned)
    _check_same_names("the base MODEL", "the fine-tuned MODEL", base_weights, tuned_weights)
    prefixes = loadable_weight_keys(base.model)
    key_map = comfy.lora.model_lora_keys_unet(base.model, {})

    def prefix_of(name: str) -> str | None:
        key = "diffusion_model." + name
        if key in prefixes:
            return prefixes[key][: -len(".weight")] if prefixes[key].endswith(".weight") else prefixes[key]
        return key if key in key_map else None

    pairs = ((name, base_weights[name], tuned_weights[name]) for name in base_weights)
    result = _extract(pairs, prefix_of, rank, energy, device, ("the base MODEL", "the fine-tuned MODEL"))
    return _write(result, output, {"base": "MODEL", "tuned": "MODEL"}, rank, energy, dtype, overwrite)


def check_device(device: str) -> None:
    """Before any work: a device PyTorch knows and this machine has."""
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        raise EriDiffusionError(f"extract: device {device!r} is no device PyTorch knows; give cpu or cuda.") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise EriDiffusionError(f"extract: device {device!r}, but this machine has no CUDA GPU; give cpu.")
    if kind not in ("cpu", "cuda"):
        raise EriDiffusionError(f"extract: device {device!r}; the SVDs run on cpu or cuda.")


def _check_same_names(base_what: str, tuned_what: str, base_names: Iterable[str], tuned_names: Iterable[str]) -> None:
    missing = sorted(set(base_names) ^ set(tuned_names))
    if missing:
        raise EriDiffusionError(
            f"{base_what} and {tuned_what} differ in their weights' names ({len(missing)}, e.g. "
            f"{missing[0]}); give a fine-tuned model and the base it was tuned from."
        )


def _extract(
    pairs: Iterable[tuple[str, torch.Tensor, torch.Tensor]],
    prefix_of: Callable[[str], str | None],
    rank: int | None,
    energy: float | None,
    device: str,
    sources: tuple[str, str],
) -> tuple[dict[str, torch.Tensor], Result]:
    """(LoRA tensors, Result) of the (name, base weight, tuned weight) `pairs`; `prefix_of(layer weight name)` is
    the layer's key prefix in the file, None where no LoRA key addresses it."""
    tensors: dict[str, torch.Tensor] = {}
    layers: list[LayerResult] = []
    full: list[str] = []
    skipped: list[str] = []
    unchanged = 0
    for name, base_weight, tuned_weight in pairs:
        if base_weight.shape != tuned_weight.shape:
            raise EriDiffusionError(
                f"extract: {name} has shape {tuple(base_weight.shape)} in the base and "
                f"{tuple(tuned_weight.shape)} in the fine-tuned model; give the base it was tuned from."
            )
        delta = tuned_weight.to(device, torch.float32) - base_weight.to(device, torch.float32)
        if not bool(torch.isfinite(delta).all()):
            source = sources[0] if not bool(torch.isfinite(base_weight.to(device, torch.float32)).all()) else sources[1]
            raise EriDiffusionError(
                f"extract: {name} holds NaN or infinite values in {source}; nothing was written. Give a model "
                "whose weights are finite (a diverged fine-tune has no LoRA to extract)."
            )
        if not bool(delta.any()):
            unchanged += 1
            continue
        layer, _, kind = name.rpartition(".")
        prefix = prefix_of(layer + ".weight")
        if prefix is None or kind not in ("weight", "bias"):
            skipped.append(name)
        elif kind == "bias" or delta.dim() < 2:
            tensors[f"{prefix}.{'diff_b' if kind == 'bias' else 'diff'}"] = delta.cpu()
            full.append(name)
        else:
            spectrum = spectrum_of_matrix(delta)
            if rank is not None:
                kept_rank = min(rank, len(spectrum.s))
            else:
                assert energy is not None  # check_rank_and_energy: one of them
                kept_rank = spectrum.rank_for(energy)
            low_rank = spectrum.truncated(kept_rank, 1.0)
            tensors.update({k: v.cpu() for k, v in lora_tensors(prefix, low_rank, 1.0).items()})
            layers.append(LayerResult(prefix, len(spectrum.s), kept_rank, spectrum.kept_energy(kept_rank)))
    if not layers and not full and skipped:
        raise EriDiffusionError(
            f"extract: {len(skipped)} weight(s) differ (e.g. {skipped[0]}), but no LoRA key addresses them, so "
            "there is nothing to write; a LoRA of this model cannot carry that change."
        )
    if not layers and not full:
        raise EriDiffusionError(
            "extract: the two models have the same weights; give the fine-tuned model and its base."
        )
    return tensors, Result("", layers, full, skipped, unchanged)


def _write(
    extracted: tuple[dict[str, torch.Tensor], Result],
    output: str,
    sources: dict[str, str],
    rank: int | None,
    energy: float | None,
    dtype: str,
    overwrite: bool,
) -> Result:
    tensors, result = extracted
    metadata = {
        "eridiffusion_extracted": json.dumps({**sources, "rank": rank, "energy": energy}),
        "ss_network_module": "networks.lora",
        "eridiffusion_adapter": "lora",
    }
    result.path = write_lora(output, tensors, metadata, dtype, overwrite)
    return result
