"""`lora merge --into`: LoRAs applied to a model (and its text encoder) at their strengths, saved as one
checkpoint through ComfyUI's own checkpoint save (what its CheckpointSave node writes), atomically."""

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import EriDiffusionError
from ..formats.atomic_file import write_atomic
from ..formats.lora_conventions import split_key
from .convert import converted_for
from .lora_layers import check_output, check_weights, read_lora, read_safetensors
from .peft_layers import PEFT_SPELLED


@dataclass
class Result:
    path: str
    loras: list[tuple[str, float, float, int]]  # [(file name, model strength, clip strength, keys)]
    converted: list[str] = field(default_factory=list)  # the file names converted to ComfyUI's keys on the way in

    def lines(self) -> list[str]:
        out = [f"wrote {self.path}: a checkpoint with {len(self.loras)} LoRA(s) merged into its weights"]
        for name, m, c, keys in self.loras:
            how = ", converted to ComfyUI's keys on the way in" if name in self.converted else ""
            out.append(f"  {name}: model {m:g}, clip {c:g}, {keys} keys{how}")
        return out


def unloaded_keys(tensors: Iterable[str], model: Any, clip: Any) -> list[str]:
    """The keys of LoRA `tensors` ComfyUI's loader would not apply to `model` (a ModelPatcher) and `clip`."""
    import comfy.lora

    key_map = comfy.lora.model_lora_keys_unet(model.model, {})
    if clip is not None:
        key_map = comfy.lora.model_lora_keys_clip(clip.cond_stage_model, key_map)
    unloaded = []
    for key in tensors:
        split = split_key(key)
        if split is None or split[0] not in key_map:
            unloaded.append(key)
    return unloaded


def merge_into_checkpoint(
    model: Any, clip: Any, vae: Any, loras: Sequence[tuple[str, float, float]], output: str, overwrite: bool = False
) -> Result:
    """Write checkpoint `output`: ModelPatcher `model` (and CLIP `clip`, VAE `vae`, either may be None) with
    each of `loras` [(path, model strength, clip strength)] applied as LoraLoader applies it. A LoRA with
    keys the loader would leave out, or a PEFT/diffusers file (whose alphas it does not read), is converted
    to ComfyUI's keys for the model first (any trainer's format convert reads); a key that still would not
    load is refused. The inputs are not changed."""
    import comfy.sd

    if not loras:
        raise EriDiffusionError("merge into a checkpoint: give at least one LoRA file.")
    check_weights(loras, "merge into a checkpoint")
    check_output(output, overwrite)
    for path, _, _ in loras:
        read_lora(path, other_trainers=True)  # readable, a LoRA, finite, before any is applied
    patched_model, patched_clip, done, converted = model, clip, [], []
    for path, strength_model, strength_clip in loras:
        tensors, _ = read_safetensors(path, "LoRA")
        loads_to = clip if strength_clip else None
        if any(key.endswith(PEFT_SPELLED) for key in tensors) or unloaded_keys(tensors, model, loads_to):
            tensors = converted_for(path, model.model)[0]
            converted.append(os.path.basename(path))
        unloaded = unloaded_keys(tensors, model, loads_to)
        if unloaded:
            raise EriDiffusionError(
                f"{path}: {len(unloaded)} of its {len(tensors)} keys would not load into this model (e.g. "
                f"{', '.join(sorted(unloaded)[:3])}), in ComfyUI's keys for it; nothing was written. Give the LoRA "
                "of this model (its text-encoder layers load with the checkpoint's CLIP at a strength above 0)."
            )
        patched_model, patched_clip = comfy.sd.load_lora_for_models(
            patched_model, patched_clip, tensors, strength_model, strength_clip if clip is not None else 0
        )
        done.append((os.path.basename(path), strength_model, strength_clip, len(tensors)))
    metadata = {"eridiffusion_merged_loras": json.dumps([list(d[:3]) for d in done])}
    write_atomic(
        output,
        lambda tmp: comfy.sd.save_checkpoint(tmp, patched_model, patched_clip, vae, metadata=metadata),
        overwrite=overwrite,
    )
    return Result(output, done, converted)
