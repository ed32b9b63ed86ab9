"""The training-state file written next to each checkpoint: `<name>.training_state` beside
`<name>.safetensors`. It is a safetensors file (its tensors, and everything else as one JSON document
in its metadata), named so that no loader lists it as a model; reading it never runs code, unlike
the pickled `.state.pt` of earlier versions, which is refused."""

import json
import os
from typing import Any

import safetensors
import torch

from ..errors import EriDiffusionError
from .atomic_file import write_safetensors_atomic

STATE_SUFFIX = ".training_state"


PICKLED_STATE_SUFFIX = ".state.pt"  # written by EriDiffusion before the safetensors state; never opened


STATE_FORMAT = "eridiffusion-training-state-1"


def _beside(adapter_path: str, suffix: str) -> str:
    stem = adapter_path[: -len(".safetensors")] if adapter_path.endswith(".safetensors") else adapter_path
    return stem + suffix


def state_path(adapter_path: str) -> str:
    return _beside(adapter_path, STATE_SUFFIX)


def shards_path(adapter_path: str) -> str:
    """The folder of a sharded run's optimizer state (sharding fsdp), beside its checkpoint."""
    return _beside(adapter_path, ".optimizer_shards")


def pickled_state_path(adapter_path: str) -> str:
    return _beside(adapter_path, PICKLED_STATE_SUFFIX)


def _encode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
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


def _decode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
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


def save_state(adapter_path: str, state: dict[str, Any]) -> None:
    """Write `state` (nested dicts, lists, tuples, numbers, strings and tensors) beside the adapter."""
    write_state(adapter_path, state_content(state))


def state_content(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """`state` as a state file's tensors (copies in host memory: the run may change its own from here on) and
    metadata, for write_state."""
    tensors: dict[str, torch.Tensor] = {}
    metadata = {"format": STATE_FORMAT, "state": json.dumps(_encode(state, tensors))}
    return tensors, metadata


def write_state(adapter_path: str, content: tuple[dict[str, torch.Tensor], dict[str, str]]) -> None:
    """The state file of state_content's `content` beside the adapter at `adapter_path`."""
    write_safetensors_atomic(state_path(adapter_path), *content, overwrite=True)


def damaged_state_fix(path: str, adapter_path: str) -> str:
    """What to do about a training state at `path` that cannot be used."""
    return (
        f"resume from another checkpoint, or move {os.path.basename(path)} away to continue from "
        f"{os.path.basename(adapter_path)}'s weights alone as a new run."
    )


def load_state(path: str, adapter_path: str) -> Any:
    """The state save_state wrote to `path`; a file that is not one is refused by name."""
    fix = damaged_state_fix(path, adapter_path)
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
