"""`lora convert`: a LoRA (DoRA, LoKr, LoHa) file in another trainer's keys (ai-toolkit, diffusers/PEFT,
kohya, musubi-tuner, OneTrainer, SimpleTuner) to ComfyUI's keys for a given model, or a LoRA to
diffusers/PEFT's. Every key lands in the output or is named in an error; none is dropped."""

import json
import math
import os
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import EriDiffusionError
from ..formats.layer_names import (
    LayerTarget,
    diffusers_layers,
    is_unet,
    layer_naming,
    layer_table,
    weight_shapes,
)
from ..formats.lora_conventions import (
    PEFT_ADAPTER_METADATA,
    TEXT_ENCODER_PREFIXES,
    PeftScales,
    peft_metadata,
    peft_scales,
    peft_weights_file,
    split_key,
)
from ..formats.lora_file import loadable_weight_keys
from .lora_layers import (
    LayerPart,
    LayerTensors,
    check_layers,
    check_output,
    dtype_name,
    layer_algorithm,
    rank_and_alpha,
    read_safetensors,
    write_lora,
)
from .model_layout import WeightReader
from .peft_dora import is_peft_dora, weight_change

TARGETS = ("comfyui", "peft")


@dataclass
class Result:
    path: str
    to: str
    layers: int
    spellings: Counter[str]  # how the input named its layers: {"transformer.<name> lora_A/lora_B": count}
    alphas: str  # where the alphas of layers without `.alpha` came from
    fused: list[tuple[str, int]] = field(default_factory=list)  # [(layer in the output, parts it joins)]
    split: list[tuple[str, int]] = field(default_factory=list)  # [(ComfyUI weight, parts it became)]
    whole: list[str] = field(default_factory=list)  # ComfyUI weights a PEFT DoRA changes, written as `diff`
    text_encoder: int = 0

    def lines(self) -> list[str]:
        what = "ComfyUI's keys" if self.to == "comfyui" else "diffusers/PEFT's keys"
        out = [f"wrote {self.path}: {self.layers} layers in {what}"]
        out += [f"  read {count} layers named {spelling}" for spelling, count in self.spellings.most_common()]
        out.append(f"  alphas: {self.alphas}")
        if self.fused:
            out.append(
                f"  {len(self.fused)} layers joined into ComfyUI's fused weights, e.g. {self.fused[0][0]} from "
                f"{self.fused[0][1]} parts"
            )
        if self.whole:
            out.append(
                f"  {len(self.whole)} PEFT DoRA layers written as their whole weight change (diff), "
                f"e.g. {self.whole[0]}"
            )
        if self.split:
            out.append(
                f"  {len(self.split)} fused ComfyUI weights split into diffusers' layers, e.g. {self.split[0][0]}"
            )
        if self.text_encoder:
            out.append(f"  {self.text_encoder} text-encoder layers kept under their names")
        return out


def convert_lora(
    path: str,
    output: str,
    model: Any,
    to: str = "comfyui",
    dtype: str | None = None,
    overwrite: bool = False,
    weights: WeightReader | None = None,
) -> Result:
    """Write `output`: LoRA file `path` in ComfyUI's keys for ComfyUI model `model` (a BaseModel: the
    MODEL's .model, or a key layout from model_layout), or, with to="peft", in diffusers/PEFT's.
    `weights` (weight key -> tensor) gives the model's weights where `model` holds none (a layout):
    PEFT DoRA layers need them."""
    if to not in TARGETS:
        raise EriDiffusionError(f"convert: unknown target {to!r}; give one of {', '.join(TARGETS)}.")
    check_output(output, overwrite)
    path = peft_weights_file(path)
    tensors, metadata = read_safetensors(path, "LoRA")
    layers = _grouped(tensors, path)
    scales = peft_scales(path, metadata)
    text, placed = _placed(path, model, layers, scales)
    shapes = weight_shapes(model)
    without = sum(1 for g in layers.values() if "lora_down.weight" in g and "alpha" not in g)
    alphas = f"{without} layers without one: {scales.source}" if without else "every layer has its alpha"
    result = Result("", to, len(placed), Counter(_spelling(n, g) for n, g in layers.items()), alphas)
    for weight, parts in placed.items():  # before any layer is rewritten
        for name, target, group in parts:
            _check_fits(path, name, target, group, shapes[weight], type(model).__name__)
    native = {}
    base_weight = weights or _weights_of(model)
    for weight, parts in placed.items():
        native[weight] = _native_layer(weight, parts, shapes[weight], path, base_weight)
        if "diff" in native[weight] and any(is_peft_dora(g) for _, _, g in parts):
            result.whole.append(weight)
        elif len(parts) > 1 or parts[0][1] != LayerTarget(weight):
            result.fused.append((weight, len(parts)))
    meta = {k: v for k, v in metadata.items() if k != PEFT_ADAPTER_METADATA}
    meta["eridiffusion_converted"] = json.dumps({"from": os.path.basename(path), "to": to})
    if to == "comfyui":
        prefixes = loadable_weight_keys(model)
        out = {f"{prefixes.get(w, w[: -len('.weight')])}.{n}": t for w, g in native.items() for n, t in g.items()}
        out.update({f"{name}.{n}": t for name, group in text.items() for n, t in group.items()})
        result.text_encoder = len(text)
    else:
        if text:
            raise EriDiffusionError(
                f"{path} holds {len(text)} text-encoder layers (e.g. {next(iter(text))}); conversion to PEFT "
                "covers the diffusion model's layers only. Convert to comfyui instead, or remove them first."
            )
        out, meta[PEFT_ADAPTER_METADATA], result.split = _peft_tensors(native, model, shapes, path)
    dtype = dtype or dtype_name(next(iter(tensors.values())).dtype)
    result.path = write_lora(output, out, meta, dtype, overwrite)
    return result


def converted_for(
    path: str, model: Any, weights: WeightReader | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, str], Result]:
    """LoRA file `path` (any trainer's) converted to ComfyUI's keys for `model` as convert_lora writes it:
    (its tensors, its metadata, what convert_lora reported), no file left behind."""
    with tempfile.TemporaryDirectory() as folder:
        result = convert_lora(path, os.path.join(folder, "converted.safetensors"), model, weights=weights)
        return (*read_safetensors(result.path, "LoRA"), result)


def _placed(
    path: str, model: Any, layers: dict[str, LayerTensors], scales: PeftScales
) -> tuple[dict[str, LayerTensors], dict[str, list[LayerPart]]]:
    """(text-encoder layers, {ComfyUI weight: [(name, LayerTarget, tensors)] of the layers that change it}) of
    the file's `layers`, each with its alpha; layers that name no weight of `model` are an error naming them."""
    table = layer_table(model)
    text: dict[str, LayerTensors] = {}
    placed: dict[str, list[LayerPart]] = {}
    unplaced: list[str] = []
    for name, group in layers.items():
        if name.startswith(TEXT_ENCODER_PREFIXES):
            text[name] = _with_alpha(group, name, scales)
        elif name in table:
            placed.setdefault(table[name].weight, []).append((name, table[name], _with_alpha(group, name, scales)))
        else:
            unplaced.append(name)
    if unplaced:
        raise EriDiffusionError(
            f"{path}: {len(unplaced)} of its {len(layers)} layers name no weight of this {type(model).__name__} "
            f"model (e.g. {', '.join(sorted(unplaced)[:3])}); convert it with the model it was trained for."
        )
    return text, placed


def _check_fits(
    path: str, name: str, target: LayerTarget, group: LayerTensors, shape: tuple[int, ...], model_name: str
) -> None:
    """A LoRA (or full-change) layer whose weight change is not of the shape of the weight it names (an
    SD1.5 LoRA given an SD2 model: the same names, other widths) would load and then fail or be skipped."""
    rows, columns = target.rows[1] if target.rows else shape[0], math.prod(shape[1:])
    up, down, diff = group.get("lora_up.weight"), group.get("lora_down.weight"), group.get("diff")
    if up is not None and down is not None:
        changes = (up.shape[0], down[0].numel())
    elif diff is not None and target.rows is None:
        changes, rows = (diff.shape[0], math.prod(diff.shape[1:])), shape[0]
    else:
        return
    if changes != (rows, columns):
        raise EriDiffusionError(
            f"{path}: layer {name} changes a {changes[0]}x{changes[1]} weight, but the {model_name} weight it names "
            f"is {rows}x{columns}{' (its rows for this part)' if target.rows else ''}; the LoRA was made for "
            "another model (one with the same layer names, other widths): convert it with the model it was trained for."
        )


def _weights_of(model: Any) -> WeightReader:
    """weight key -> the model's weight (None for a layout on the meta device)."""
    state = model.state_dict()
    return lambda key: state[key] if state[key].device.type != "meta" else None


def _grouped(tensors: dict[str, torch.Tensor], path: str) -> dict[str, LayerTensors]:
    """{layer name: {ComfyUI tensor name: tensor}}; keys no known tensor name ends are named in an error."""
    layers: dict[str, LayerTensors] = {}
    unknown: list[str] = []
    for key, tensor in tensors.items():
        split = split_key(key)
        if split is None:
            unknown.append(key)
        else:
            layers.setdefault(split[0], {})[split[1]] = tensor
    if unknown:
        raise EriDiffusionError(
            f"{path}: {len(unknown)} of its {len(tensors)} keys are no LoRA tensor EriDiffusion knows (e.g. "
            f"{', '.join(sorted(unknown)[:3])}); nothing was written. Remove them, or report the trainer that "
            "wrote them."
        )
    check_layers(path, layers)
    return layers


def _with_alpha(group: LayerTensors, name: str, scales: PeftScales) -> LayerTensors:
    """A LoRA layer's tensors with an `alpha` (from the PEFT config, or the rank) where the file has none."""
    if "lora_down.weight" not in group or "alpha" in group:
        return group
    rank = group["lora_down.weight"].shape[0]
    return {**group, "alpha": torch.tensor(scales.alpha_of_layer(name, rank))}


def _spelling(name: str, group: LayerTensors) -> str:
    return f"{layer_naming(name)} ({layer_algorithm(group)})"


def _native_layer(
    weight: str, parts: list[LayerPart], shape: tuple[int, ...], path: str, base_weight: WeightReader
) -> LayerTensors:
    """The tensors of ComfyUI weight `weight` from the file's layers `parts` [(name, LayerTarget, tensors)]
    that change it: renamed when one layer changes all of it, else LoRAs joined into one; PEFT DoRAs as
    the whole weight change (`base_weight(weight)`: the model's weight)."""
    if any(is_peft_dora(group) for _, _, group in parts):
        return weight_change(weight, parts, shape, base_weight(weight), path)
    name, target, group = parts[0]
    if len(parts) == 1 and target == LayerTarget(weight):
        return group
    full = [n for n, t, _ in parts if t.rows is None]  # (its halves swapped or not)
    if full and len(parts) > 1:
        names = ", ".join(n for n, _, _ in parts)
        raise EriDiffusionError(f"{path}: layers {names} all change {weight}; keep one of them.")
    for name, _, group in parts:
        if layer_algorithm(group) != "lora" or "dora_scale" in group or "lora_mid.weight" in group:
            raise EriDiffusionError(
                f"{path}: layer {name} is a {layer_algorithm(group)}{' (DoRA)' if 'dora_scale' in group else ''} "
                f"of a part of {weight}, which ComfyUI keeps as one fused weight; only plain LoRA layers can be "
                "joined into it (the magnitude or Kronecker factors of each part have no fused form)."
            )
    if target.swap_halves:
        up = group["lora_up.weight"]
        return {**group, "lora_up.weight": torch.cat(up.chunk(2, dim=0)[::-1], dim=0)}
    return _joined(parts, shape[0])


def _joined(parts: Sequence[LayerPart], rows: int) -> LayerTensors:
    """One LoRA for a fused weight of `rows` rows from LoRAs of row slices of it: sharing their down
    matrix when they all have the same one and the same alpha (as a split of a fused LoRA does: exact
    round trip), else their ranks concatenated with each scale folded into its up."""
    downs = [g["lora_down.weight"] for _, _, g in parts]
    alphas = {float(g["alpha"]) for _, _, g in parts}
    shared = len(alphas) == 1 and all(torch.equal(d, downs[0]) for d in downs)
    ranks = [d.shape[0] for d in downs]
    total = ranks[0] if shared else sum(ranks)
    dtype = downs[0].dtype
    up = torch.zeros(rows, total, dtype=dtype)
    column = 0
    for (_, target, group), rank in zip(parts, ranks):
        assert target.rows is not None  # _native_layer refuses a whole-weight layer beside others
        offset, size = target.rows
        scale = 1.0 if shared else float(group["alpha"]) / rank
        part_up = group["lora_up.weight"].reshape(size, rank)
        up[offset : offset + size, column : column + rank] = part_up if shared else (part_up.float() * scale).to(dtype)
        column += 0 if shared else rank
    down = downs[0] if shared else torch.cat(downs, dim=0)
    alpha = alphas.pop() if shared else float(total)
    return {"lora_up.weight": up, "lora_down.weight": down, "alpha": torch.tensor(alpha)}


def _peft_parts(
    weight: str, names: list[tuple[str, LayerTarget]], shape: tuple[int, ...]
) -> list[tuple[str, LayerTarget]]:
    """[(diffusers name, LayerTarget)] a ComfyUI weight becomes in diffusers' names: one name for all of
    it, or names whose row slices cover it exactly; else ComfyUI's own name."""
    full = [(n, t) for n, t in names if t.rows is None]
    if full:
        return full[:1]
    sliced = sorted(((t.rows, n, t) for n, t in names if t.rows is not None), key=lambda item: item[0])
    covered = [rows for rows, _, _ in sliced]  # (every name's: none is full)
    if sliced and covered[0][0] == 0 and all(a[0] + a[1] == b[0] for a, b in zip(covered, covered[1:])):
        if covered[-1][0] + covered[-1][1] == shape[0]:
            return [(n, t) for _, n, t in sliced]
    return [(weight[len("diffusion_model.") : -len(".weight")], LayerTarget(weight))]


def _peft_tensors(
    native: dict[str, LayerTensors], model: Any, shapes: dict[str, tuple[int, ...]], path: str
) -> tuple[dict[str, torch.Tensor], str, list[tuple[str, int]]]:
    """(tensors, lora_adapter_metadata, split weights) of ComfyUI-keyed LoRA layers in diffusers' keys."""
    by_weight: dict[str, list[tuple[str, LayerTarget]]] = {}
    for name, target in diffusers_layers(model).items():
        by_weight.setdefault(target.weight, []).append((name, target))
    component = "unet" if is_unet(model) else "transformer"
    tensors: dict[str, torch.Tensor] = {}
    ranks: dict[str, int] = {}
    alphas: dict[str, float] = {}
    split: list[tuple[str, int]] = []
    for weight, group in native.items():
        if layer_algorithm(group) != "lora" or set(group) - {"lora_up.weight", "lora_down.weight", "alpha"}:
            extra = sorted(set(group) - {"lora_up.weight", "lora_down.weight", "alpha"}) or [layer_algorithm(group)]
            raise EriDiffusionError(
                f"{path}: the layer of {weight} holds {', '.join(extra)}; conversion to PEFT covers plain LoRA "
                "layers (PEFT's DoRA normalizes output rows where ComfyUI's dora_scale normalizes input columns, "
                "and its LoKr/LoHa configs do not carry per-layer factors). Convert a LoRA file."
            )
        rank, alpha = rank_and_alpha(group)
        assert rank is not None and alpha is not None  # a LoRA layer has lora_down (check_layers)
        parts = _peft_parts(weight, by_weight.get(weight, []), shapes[weight])
        if len(parts) > 1:
            split.append((weight, len(parts)))
        for name, target in parts:
            up = group["lora_up.weight"]
            if target.rows is not None:
                up = up[target.rows[0] : target.rows[0] + target.rows[1]]
            if target.swap_halves:
                up = torch.cat(up.chunk(2, dim=0)[::-1], dim=0)
            tensors[f"{component}.{name}.lora_A.weight"] = group["lora_down.weight"].clone()
            tensors[f"{component}.{name}.lora_B.weight"] = up.contiguous()
            ranks[name], alphas[name] = rank, alpha
    return tensors, peft_metadata(component, ranks, alphas, ranks), split
