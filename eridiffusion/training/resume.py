"""Stopping and resuming a run: the training-state file written next to each checkpoint, and
rebuilding adapters from a saved file (ours, with or without that state, or a plain LoRA).

`<name>.safetensors` is the adapter (a normal ComfyUI LoRA file); `<name>.training_state` beside
it holds what an exact continuation needs: step, optimizer, LR schedule, loss scaler, the random
generators' states, the losses so far and a fingerprint of the settings that must not change. It is
a safetensors file (its tensors, and everything else as one JSON document in its metadata), named
so that no loader lists it as a model; reading it never runs code, unlike the pickled `.state.pt`
of earlier versions, which is refused.
"""

import json
import os
from dataclasses import dataclass

import safetensors
import torch

from .adapters import AdapterSet, AdapterSpec
from .atomic_file import write_safetensors_atomic
from .errors import EriDiffusionError

STATE_SUFFIX = ".training_state"
PICKLED_STATE_SUFFIX = ".state.pt"  # written by EriDiffusion before the safetensors state; never opened
STATE_FORMAT = "eridiffusion-training-state-1"

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
)


def _beside(adapter_path, suffix):
    stem = adapter_path[: -len(".safetensors")] if adapter_path.endswith(".safetensors") else adapter_path
    return stem + suffix


def state_path(adapter_path):
    return _beside(adapter_path, STATE_SUFFIX)


def pickled_state_path(adapter_path):
    return _beside(adapter_path, PICKLED_STATE_SUFFIX)


def _encode(value, tensors):
    """`value` as JSON, its tensors moved into `tensors` under numbered names. Dicts (whose keys
    may be ints), tuples and tensors become tagged objects, so decoding gives back the same types."""
    if isinstance(value, torch.Tensor):
        name = str(len(tensors))
        tensors[name] = value.detach().to("cpu").contiguous().clone()  # safetensors refuses shared storage
        return {"tensor": name}
    if isinstance(value, dict):
        return {"dict": [[_encode(k, tensors), _encode(v, tensors)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"tuple": [_encode(v, tensors) for v in value]}
    if isinstance(value, list):
        return [_encode(v, tensors) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise EriDiffusionError(
        f"the training state holds a {type(value).__name__}, which a state file cannot store; "
        "this optimizer cannot be resumed."
    )


def _decode(value, tensors):
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    ((tag, content),) = value.items()
    if tag == "tensor":
        return tensors[content]
    if tag == "tuple":
        return tuple(_decode(v, tensors) for v in content)
    if tag == "dict":
        return {_decode(k, tensors): _decode(v, tensors) for k, v in content}
    raise ValueError(f"unknown entry {tag!r}")


def save_state(adapter_path, state):
    """Write `state` (nested dicts, lists, tuples, numbers, strings and tensors) beside the adapter."""
    tensors = {}
    metadata = {"format": STATE_FORMAT, "state": json.dumps(_encode(state, tensors))}
    write_safetensors_atomic(state_path(adapter_path), tensors, metadata, overwrite=True)


def load_state(path, adapter_path):
    """The state save_state wrote to `path`; a file that is not one is refused by name."""
    fix = (
        f"resume from another checkpoint, or move {os.path.basename(path)} away to continue from "
        f"{os.path.basename(adapter_path)}'s weights alone as a new run."
    )
    try:
        with safetensors.safe_open(path, "pt") as f:
            metadata = f.metadata() or {}
            tensors = {k: f.get_tensor(k).clone() for k in f.keys()}
    except Exception as error:  # safetensors raises several types for a damaged file
        raise EriDiffusionError(
            f"training state {path} is damaged (truncated or overwritten: {error}); {fix}"
        ) from None
    if metadata.get("format") != STATE_FORMAT:
        raise EriDiffusionError(
            f"{path} is not a training state EriDiffusion wrote (no '{STATE_FORMAT}' format entry); {fix}"
        )
    try:
        return _decode(json.loads(metadata["state"]), tensors)
    except (KeyError, ValueError, TypeError, RecursionError) as error:
        raise EriDiffusionError(f"training state {path} is damaged ({type(error).__name__}: {error}); {fix}") from None


@dataclass
class ResumePoint:
    """A saved adapter to continue from, and its training state when there is one."""

    path: str
    tensors: dict
    spec: AdapterSpec
    state: dict | None = None


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
            spec = AdapterSpec(**json.loads(metadata["eridiffusion_adapter_spec"]))
        else:
            spec = _spec_from_tensors(tensors, path)
        state = None
        if os.path.isfile(state_path(path)):
            state = load_state(state_path(path), path)
        elif os.path.exists(pickled_state_path(path)):
            raise EriDiffusionError(
                f"{pickled_state_path(path)} is a training state in the pickle format of earlier EriDiffusion "
                "versions, which is never opened (a pickle can run any code). To continue from "
                f"{os.path.basename(path)}'s weights as a new run, move {os.path.basename(pickled_state_path(path))} "
                "away; to continue a run exactly, resume from a checkpoint written by this version."
            )
    return ResumePoint(path, tensors, spec, state)


def adapters_from_tensors(root, tensors, spec, prefixes, path):
    """An AdapterSet for the layers of `root` that the file addresses, set to the file's values.
    Returns (adapter set, the file keys it used)."""
    by_prefix = {prefix: key[: -len(".weight")] for key, prefix in prefixes.items()}
    groups = {}
    for key, tensor in tensors.items():
        name = next((n for n in TENSOR_NAMES if key.endswith("." + n)), None)
        prefix = key[: -len(name) - 1] if name else None
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
            raise EriDiffusionError(
                f"{path}: the weights for {prefix} do not fit a {spec.algorithm} of rank "
                f"{spec.rank} on this model ({error}). Was it trained on another model?"
            ) from None
        adapters[layer] = adapter
    used = {f"{p}.{n}" for p, g in groups.items() for n in g}
    return AdapterSet(spec, adapters), used
