"""Stopping and resuming a run: the training-state file written next to each checkpoint, and
rebuilding adapters from a saved file (ours, with or without that state, or a plain LoRA).

`<name>.safetensors` is the adapter (a normal ComfyUI LoRA file); `<name>.state.pt` beside it
holds what an exact continuation needs: step, optimizer, LR schedule, loss scaler, the random
generators' states, the losses so far and a fingerprint of the settings that must not change.
"""
import json
import os
from dataclasses import dataclass
from typing import Optional

import safetensors
import torch

from .adapters import AdapterSet, AdapterSpec
from .atomic_file import write_atomic
from .errors import EriDiffusionError

STATE_SUFFIX = ".state.pt"

# Names an adapter's tensors have in a file, after the layer prefix (ComfyUI's names).
TENSOR_NAMES = ("lora_up.weight", "lora_down.weight", "lora_mid.weight", "alpha", "dora_scale",
                "hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b", "hada_t1", "hada_t2",
                "lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b", "lokr_t2")


def state_path(adapter_path):
    return adapter_path[:-len(".safetensors")] + STATE_SUFFIX if adapter_path.endswith(".safetensors") \
        else adapter_path + STATE_SUFFIX


def save_state(adapter_path, state):
    write_atomic(state_path(adapter_path), lambda tmp: torch.save(state, tmp), overwrite=True)


@dataclass
class ResumePoint:
    """A saved adapter to continue from, and its training state when there is one."""
    path: str
    tensors: dict
    spec: AdapterSpec
    state: Optional[dict] = None


def _spec_from_tensors(tensors, path):
    """The spec of a plain LoRA file written by another tool: algorithm and rank from its keys."""
    downs = [t for k, t in tensors.items() if k.endswith(".lora_down.weight")]
    if downs and not any(k.endswith((".hada_w1_a", ".lokr_w1", ".lokr_w1_a")) for k in tensors):
        rank = downs[0].shape[0]
        alphas = [float(t) for k, t in tensors.items() if k.endswith(".alpha")]
        algorithm = "dora" if any(k.endswith(".dora_scale") for k in tensors) else "lora"
        return AdapterSpec(algorithm=algorithm, rank=rank, alpha=alphas[0] if alphas else float(rank),
                           targets="all-linear")
    raise EriDiffusionError(f"{path}: not a LoRA/DoRA file EriDiffusion can continue from (LoHa and LoKr files "
                            "resume only when EriDiffusion wrote them). Start a new run instead.")


def load_resume_point(path):
    """Read an adapter file (and its state file if present) for LoRATrainer to continue from."""
    if not os.path.isfile(path):
        raise EriDiffusionError(f"resume file {path} does not exist; give the path of a .safetensors checkpoint "
                                "(runs write them to output/<run_name>/checkpoints/).")
    try:
        with safetensors.safe_open(path, "pt") as f:
            metadata = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as error:  # safetensors raises several types for a damaged file
        raise EriDiffusionError(f"{path} cannot be read as a .safetensors file ({error}); pick another checkpoint.")
    if "eridiffusion_adapter_spec" in metadata:
        spec = AdapterSpec(**json.loads(metadata["eridiffusion_adapter_spec"]))
    else:
        spec = _spec_from_tensors(tensors, path)
    state = None
    if os.path.isfile(state_path(path)):
        state = torch.load(state_path(path), map_location="cpu", weights_only=False)
    return ResumePoint(path, tensors, spec, state)


def adapters_from_tensors(root, tensors, spec, prefixes, path):
    """An AdapterSet for the layers of `root` that the file addresses, set to the file's values.
    Returns (adapter set, the file keys it used)."""
    by_prefix = {prefix: key[:-len(".weight")] for key, prefix in prefixes.items()}
    groups = {}
    for key, tensor in tensors.items():
        name = next((n for n in TENSOR_NAMES if key.endswith("." + n)), None)
        prefix = key[:-len(name) - 1] if name else None
        if prefix in by_prefix:
            groups.setdefault(prefix, {})[name] = tensor
    layer_groups = {by_prefix[prefix]: (prefix, group) for prefix, group in groups.items()}
    adapters = {}
    # model order, as a fresh AdapterSet has it: a resumed optimizer's state lines up by position
    ordered = [(name, module) for name, module in root.named_modules() if name in layer_groups]
    for index, (layer, module) in enumerate(ordered):
        prefix, group = layer_groups[layer]
        adapter = spec.build(module, seed=index)
        try:
            adapter.load_comfy_tensors(group)
        except (KeyError, RuntimeError) as error:
            raise EriDiffusionError(f"{path}: the weights for {prefix} do not fit a {spec.algorithm} of rank "
                                    f"{spec.rank} on this model ({error}). Was it trained on another model?")
        adapters[layer] = adapter
    used = {f"{p}.{n}" for p, g in groups.items() for n in g}
    return AdapterSet(spec, adapters), used
