"""What a run's trained tensors are saved as, whatever was trained: the tensors under the names their
ComfyUI loader reads, the metadata, and the checked, atomic write of the .safetensors file (with EMA,
the trained weights beside as *_raw). lora_file.py's TrainedLoRA and model_file.py's
DiffusionModelFile are its kinds."""

import json
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import EriDiffusionError
from .atomic_file import write_safetensors_atomic

SAVE_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
# A run's checkpoints: each tensor in the dtype it is held in (an adapter's fp32 master weights, a fine-tune's
# bf16 copies, the frozen rest in the model's own), exact without widening: Flux.1-dev's fine-tune in bf16 is
# a 24 GB checkpoint, not 48.
EXACT = "exact"
# A model saved in fp8: its weight matrices and kernels in float8_e4m3fn, as the fp8 files UNETLoader loads hold
# them (ComfyUI computes in its compute dtype from them), everything else in bf16.
FP8 = "fp8_e4m3fn"


@dataclass
class TrainedFile:
    """A trained file's content: tensors under the names its loader reads (on the CPU) and the metadata."""

    tensors: dict[str, torch.Tensor]  # (each in the dtype it is held in: the saved dtype casts them)
    metadata: dict[str, Any] = field(default_factory=dict)  # a value that is no str is saved as JSON
    raw: "TrainedFile | None" = None  # with EMA (these tensors): the trained weights, saved beside as *_raw

    what = "file"  # what the file is, as its errors name it

    def kept_as_is(self, key: str, tensor: torch.Tensor) -> bool:
        """Whether the tensor `key` is saved in its own dtype, not the file's (a count, an index)."""
        return not tensor.is_floating_point()

    def saved_dtype(self, key: str, tensor: torch.Tensor, dtype: str) -> torch.dtype:
        """The dtype the tensor `key` is saved in when the file is saved in `dtype` (a SAVE_DTYPES name, or
        EXACT: its own)."""
        return tensor.dtype if dtype == EXACT else SAVE_DTYPES[dtype]

    def save(self, path: str, dtype: str = "fp16", overwrite: bool = False) -> str:
        """Write the file (and, with `raw`, <name>_raw.safetensors beside it); returns its path."""
        converted = self._converted(path, dtype)
        raw = self.raw._converted(raw_path(path), dtype) if self.raw is not None else None  # both checked first
        if raw is not None:
            write_safetensors_atomic(raw_path(path), *raw, overwrite=overwrite)
        return write_safetensors_atomic(path, *converted, overwrite=overwrite)

    def _converted(self, path: str, dtype: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        tensors = {
            k: (v if self.kept_as_is(k, v) else v.to(self.saved_dtype(k, v, dtype))).contiguous()
            for k, v in self.tensors.items()
        }
        check_finite(self.tensors, tensors, dtype, path, self.what)
        metadata = {k: v if isinstance(v, str) else json.dumps(v) for k, v in self.metadata.items()}
        metadata["save_dtype"] = dtype
        return tensors, metadata


def representable(source: torch.Tensor, saved: torch.Tensor) -> bool:
    """Whether `saved` (`source` in the saved dtype) holds no NaN or infinite value; for float8, whether every
    value of `source` is finite and within float8's range (torch 2.11 casts one beyond it to NaN, 2.14 to the
    largest float8: a silently clipped weight)."""
    if saved.element_size() == 1:
        return bool(torch.isfinite(source).all()) and not bool((source.abs() > torch.finfo(saved.dtype).max).any())
    return bool(torch.isfinite(saved).all())


def raw_path(path: str) -> str:
    """Where the trained (not averaged) weights of an EMA file at `path` go."""
    stem = path[: -len(".safetensors")] if path.endswith(".safetensors") else path
    return stem + "_raw.safetensors"


def check_finite(
    tensors: dict[str, torch.Tensor], converted: dict[str, torch.Tensor], dtype: str, path: str, what: str = "file"
) -> None:
    """Refuse to write a file (`what` it is: "LoRA", ...) with NaN or infinite values (`converted`: `tensors` in
    the saved dtype)."""
    bad = sorted(k for k, v in converted.items() if v.is_floating_point() and not representable(tensors[k], v))
    if not bad:
        return
    if all(bool(torch.isfinite(tensors[k]).all()) for k in bad):
        raise EriDiffusionError(
            f"{path} was not written: in {dtype}, {len(bad)} of its {len(converted)} tensors (e.g. "
            f"{bad[0]}) hold values too large for {dtype}, which "
            f"{'holds at most 448' if dtype == FP8 else 'become infinite'}; save as bf16 or fp32."
        )
    raise EriDiffusionError(
        f"{path} was not written: {len(bad)} of this {what}'s {len(converted)} tensors (e.g. {bad[0]}) "
        "hold NaN or infinite values, so the run that made it diverged. Train again with a lower "
        "learning_rate (or dtype bf16/fp32)."
    )
