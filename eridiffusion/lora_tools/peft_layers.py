"""PEFT and diffusers LoRA files in the verbs that rewrite LoRA files (resize, merge): read with each
layer's alpha from the file's LoraConfig (adapter_config.json beside it, or diffusers'
`lora_adapter_metadata`), and the rewritten layers written back in the file's own spelling: lora_A /
lora_B under its own layer names, each layer's scale folded into lora_B and a LoraConfig at alpha = rank
in the metadata, so PEFT, diffusers and ComfyUI (which reads no LoraConfig: scale 1) all read the same
weight changes from it."""

import torch

from ..errors import EriDiffusionError
from ..formats.lora_conventions import (
    PEFT_ADAPTER_METADATA,
    peft_metadata,
    peft_module_name,
    peft_scales,
    peft_weights_file,
    split_key,
)
from .lora_layers import LayerTensors, LoRAFile, read_lora, safetensors_keys

# PEFT's tensor names (diffusers' files, PEFT's save_pretrained, ai-toolkit's and SimpleTuner's)
PEFT_SPELLED = ("lora_A.weight", "lora_B.weight", "lora_A.default.weight", "lora_B.default.weight")
# The first part of a layer name that says which model component a diffusers file's layer is in
_COMPONENTS = ("transformer", "unet")


def read_lora_as_written(path: str) -> tuple[LoRAFile, str | None]:
    """`path` (a file, or PEFT's save_pretrained folder) as resize and merge read it: a file in ComfyUI's
    names as read_lora reads it; a PEFT/diffusers file with ComfyUI's tensor names under its own layer
    names, each LoRA layer given the alpha its LoraConfig says (the config itself left out of the
    metadata). Also, for a PEFT/diffusers file, where its alphas came from (else None)."""
    path = peft_weights_file(path)
    if not any(key.endswith(PEFT_SPELLED) for key in safetensors_keys(path, "LoRA")):
        return read_lora(path), None
    lora = read_lora(path, other_trainers=True)
    scales = peft_scales(path, lora.metadata)
    for prefix, group in lora.layers.items():
        if "lora_down.weight" in group and "lora_up.weight" in group and "alpha" not in group:
            rank = group["lora_down.weight"].shape[0]
            group["alpha"] = torch.tensor(scales.alpha_of_layer(prefix, rank))
    lora.metadata = {k: v for k, v in lora.metadata.items() if k != PEFT_ADAPTER_METADATA}
    return lora, scales.source


def as_peft(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> tuple[dict, dict]:
    """(tensors, metadata) of rewritten layers in ComfyUI's tensor names (lora_up, lora_down, alpha) in
    PEFT's: lora_B = lora_up · alpha / rank, lora_A = lora_down, and the LoraConfig (alpha = rank: scale
    1, which any reader then gets right) as diffusers stores it in the metadata."""
    layers: dict[str, LayerTensors] = {}
    for key, tensor in tensors.items():
        split = split_key(key)
        if split is None:
            raise EriDiffusionError(f"internal: {key} is no LoRA tensor")
        layers.setdefault(split[0], {})[split[1]] = tensor
    out, ranks = {}, {}
    for prefix, group in layers.items():
        if set(group) - {"lora_up.weight", "lora_down.weight", "alpha"}:
            extra = sorted(set(group) - {"lora_up.weight", "lora_down.weight", "alpha"})
            raise EriDiffusionError(
                f"layer {prefix} holds {', '.join(extra)}, which a PEFT LoRA file cannot hold; convert the file to "
                "ComfyUI's keys first (eridiffusion lora convert --model ...)."
            )
        up, down = group["lora_up.weight"], group["lora_down.weight"]
        rank = down.shape[0]
        alpha = float(group["alpha"]) if "alpha" in group else float(rank)
        out[f"{prefix}.lora_B.weight"] = (up.float() * (alpha / rank)).to(up.dtype)
        out[f"{prefix}.lora_A.weight"] = down
        ranks[peft_module_name(prefix)] = rank
    first = next(iter(layers), "")
    component = next((c for c in _COMPONENTS if first.startswith(c + ".")), "transformer")
    config = peft_metadata(component, ranks, {m: float(r) for m, r in ranks.items()}, ranks)
    return out, {**metadata, PEFT_ADAPTER_METADATA: config}
