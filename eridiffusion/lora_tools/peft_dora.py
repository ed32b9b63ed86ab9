"""PEFT's DoRA layers in ComfyUI's keys. PEFT scales each output row of W + s·BA by magnitude / its norm;
ComfyUI applies an output-axis `dora_scale` differently from version to version (and a DoRA's input-axis
one is another operation), so the exact form ComfyUI loads everywhere is the layer's whole weight
change W' − W (a `diff`), computed from the model's weights."""

from collections.abc import Sequence

import torch

from ..errors import EriDiffusionError
from .lora_layers import LayerPart, LayerTensors

MAGNITUDE = "lora_magnitude_vector"


def is_peft_dora(group: LayerTensors) -> bool:
    return MAGNITUDE in group


def weight_change(
    weight_key: str,
    parts: Sequence[LayerPart],
    shape: tuple[int, ...],
    base_weight: torch.Tensor | None,
    path: str,
) -> LayerTensors:
    """{"diff": W' − W} of ComfyUI weight `weight_key` (of `shape`) from the file's layers `parts`
    [(name, LayerTarget, tensors)]: PEFT DoRA parts (and plain LoRA parts beside them), each on the rows
    its target names. `base_weight` is the model's weight (None: the model's weights are not at hand)."""
    if base_weight is None or base_weight.device.type == "meta":
        names = ", ".join(name for name, _, _ in parts)
        raise EriDiffusionError(
            f"{path}: layer {names} is a PEFT DoRA (lora_magnitude_vector), whose exact form in ComfyUI's keys is "
            "the layer's whole weight change, computed from the model's weights, which are not at hand; give "
            "the model file (eridiffusion lora convert reads the weights of these layers from it) or a loaded MODEL."
        )
    delta = torch.zeros(shape, dtype=torch.float32)
    for name, target, group in parts:
        extra = set(group) - {"lora_up.weight", "lora_down.weight", "alpha", MAGNITUDE}
        if extra or "lora_up.weight" not in group:
            raise EriDiffusionError(
                f"{path}: layer {name} holds {', '.join(sorted(extra)) or 'no lora_B'} beside a PEFT DoRA of the "
                f"same weight {weight_key}; convert a file of one kind of layer."
            )
        rows = slice(target.rows[0], target.rows[0] + target.rows[1]) if target.rows else slice(None)
        base = base_weight[rows].to("cpu", torch.float32)
        if target.swap_halves:
            base = torch.cat(base.chunk(2, dim=0)[::-1])
        part = _part_change(base, group)
        if target.swap_halves:
            part = torch.cat(part.chunk(2, dim=0)[::-1])
        delta[rows] += part
    return {"diff": delta}


def _part_change(base: torch.Tensor, group: LayerTensors) -> torch.Tensor:
    """W' − W of one layer whose own weight (rows of ComfyUI's) is `base`."""
    up, down = group["lora_up.weight"].float(), group["lora_down.weight"].float()
    rank = down.shape[0]
    lora = (up.flatten(1) @ down.flatten(1)).reshape(base.shape) * (float(group["alpha"]) / rank)
    if MAGNITUDE not in group:
        return lora
    combined = base + lora
    norms = combined.flatten(1).norm(dim=1)
    scale = group[MAGNITUDE].float().flatten() / norms
    return combined * scale.reshape(-1, *[1] * (base.dim() - 1)) - base
