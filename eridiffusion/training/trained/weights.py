"""A model's own weights trained (full fine-tuning, issue 47): the weight and bias of each layer
AdapterSpec's targets/include/exclude choose, as trainable copies (fp32, or bf16) the training clone computes
with, standing in the bypass injection as adapters do: the MODEL's tensors are never written. Saved as
the whole diffusion model in UNETLoader's layout (formats/model_file.py); the result MODEL gets the
copies as ComfyUI weight patches ("set"), so it samples, merges and saves like a loaded model."""

import contextlib
import dataclasses
import json
from typing import Any

import torch

from ...comfy_compat import load_leaving_out
from ...errors import EriDiffusionError
from ...formats.lora_file import loadable_weight_keys
from ...formats.model_file import TRAINED_KIND, DiffusionModelFile, diffusion_model_tensors
from ..adapters import AdapterSet
from ..adapters.attach import target_layers
from ..adapters.base import linear_like
from ..adapters.layer_selection import PREFIX, block_multipliers
from .base import Trained, TrainedSetup

CONVS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
TRAINABLE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # what a saved model's weights can start from
NORMS = (torch.nn.GroupNorm, torch.nn.LayerNorm, torch.nn.RMSNorm)


class LayerCopy(torch.nn.Module):
    """A layer's weight and bias as trainable copies in `dtype` (fp32, or bf16: fine_tune_dtype). In the bypass
    injection (adapters/attach.py) it computes the layer with the copies; at multiplier 0 (bypassed) with the
    layer's own tensors, brought from host memory for that forward where they were left there (a bypassed
    forward is rare: the evaluation before training, measured at the run's end)."""

    def __init__(self, layer: torch.nn.Module, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.layer = [layer]  # not a submodule: the frozen layer stays the model's
        self.weight = torch.nn.Parameter(layer.weight.detach().to(dtype, copy=True))
        bias = getattr(layer, "bias", None)
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach().to(dtype, copy=True))
        self.multiplier = 1.0
        self.frozen_products = None  # (fp8 products are the adapters' speed path)

    def tensors(self) -> dict[str, torch.nn.Parameter]:
        """{"weight": ..., "bias": ...}: the copies by their names in the layer."""
        return {"weight": self.weight} | ({"bias": self.bias} if self.bias is not None else {})

    def forward(self, x: torch.Tensor, base: Any) -> torch.Tensor:
        layer = self.layer[0]
        if self.multiplier != 0:
            own = self.weight, self.bias
        elif layer.weight.device == x.device:
            return base(x)
        else:
            own = layer.weight, getattr(layer, "bias", None)
        weight = own[0].to(x.device, x.dtype)
        bias = own[1].to(x.device, x.dtype) if own[1] is not None else None
        if isinstance(layer, torch.nn.Linear):
            return torch.nn.functional.linear(x, weight, bias)
        if isinstance(layer, CONVS):
            return layer._conv_forward(x, weight, bias)
        if isinstance(layer, torch.nn.GroupNorm):
            return torch.nn.functional.group_norm(x, layer.num_groups, weight, bias, layer.eps)
        if isinstance(layer, torch.nn.LayerNorm):
            return torch.nn.functional.layer_norm(x, layer.normalized_shape, weight, bias, layer.eps)
        return torch.nn.functional.rms_norm(x, layer.normalized_shape, weight, layer.eps)


class TrainedWeights(Trained):
    """`copies` of the chosen layers of the diffusion model, each under its layer's name as in the
    model's state dict (`diffusion_model.…`), held in an AdapterSet (their injection and bypass)."""

    def __init__(self, copies: AdapterSet, base_model: Any) -> None:
        self.copies, self.base_model = copies, base_model  # (ComfyUI's BaseModel: its file lays out a checkpoint)
        self.diffusion_model = base_model.diffusion_model
        self.listed = list(copies.parameters())

    def named_tensors(self) -> dict[str, torch.nn.Parameter]:
        """{name in the diffusion model's state dict (no `diffusion_model.`): trained copy}."""
        return {
            f"{layer[len(PREFIX) :]}.{name}": tensor
            for layer, copy in self.copies.items()
            for name, tensor in copy.tensors().items()
        }

    def parameters(self) -> list[torch.nn.Parameter]:
        return self.listed

    def parameter_groups(self, learning_rate: float, block_lr: str, text_encoder_lr: float) -> list[dict[str, Any]]:
        """One group per block_lr multiplier, in order of first appearance."""
        multipliers = block_multipliers(self.copies.layer_names, block_lr) if block_lr.strip() else {}
        by_multiplier: dict[float, list[torch.nn.Parameter]] = {}
        for layer, copy in self.copies.items():
            by_multiplier.setdefault(multipliers.get(layer, 1.0), []).extend(copy.parameters())
        return [{"params": p, "lr": learning_rate * m} for m, p in by_multiplier.items()]

    def file_content(self, metadata: dict[str, str]) -> DiffusionModelFile:
        return self.file_of(self.named_tensors(), metadata)

    def file_of(self, trained: dict[str, torch.Tensor] | None, metadata: dict[str, str]) -> DiffusionModelFile:
        """The whole diffusion model with the `trained` tensors in place of its own, and the run's `metadata`
        (None: the metadata alone, what a process other than rank 0 of a sharded run holds)."""
        meta = {
            TRAINED_KIND: "weights",
            "eridiffusion_adapter_spec": json.dumps(dataclasses.asdict(self.copies.spec)),  # what a resume reads
            "eridiffusion_modules": json.dumps(list(self.copies.layer_names)),
            **metadata,
        }
        tensors = diffusion_model_tensors(self.diffusion_model, trained) if trained is not None else {}
        return DiffusionModelFile(tensors, meta, source=self.base_model)

    def apply_to(self, patcher: Any) -> None:
        """The copies as ComfyUI's "set" patches: loading `patcher` writes them into its weights (the
        input's come back when it unloads), which ModelSave saves and later patches (a LoRA) add to."""
        patches = {
            PREFIX + name: ("set", (tensor.detach().to(patcher.offload_device, copy=True),))
            for name, tensor in self.named_tensors().items()
        }
        patcher.add_patches(patches, 1.0)

    def result_clip(self) -> Any:
        return None

    def bypassed(self) -> contextlib.AbstractContextManager[None]:
        return self.copies.bypassed()

    def requires_grad_(self, requires_grad: bool) -> None:
        self.copies.requires_grad_(requires_grad)

    def model_part(self) -> torch.nn.Module:
        return self.copies


def trained_weights(setup: TrainedSetup) -> TrainedWeights:
    """Trainable copies of the layers `setup.spec` chooses (targets, include, exclude; convs with conv_rank >
    0, norms with train_norms_and_biases), at the model's values or a resume file's, injected on the clone."""
    patcher, spec = setup.patcher, setup.spec
    layers = target_layers(patcher.model, spec, loadable_weight_keys(patcher.model))
    with torch.inference_mode(False):  # ComfyUI runs nodes under inference mode; these must stay trainable
        copies = AdapterSet(spec, {name: LayerCopy(layer, setup.weights_dtype) for name, layer in layers})
        trained = TrainedWeights(copies, patcher.model)
        if setup.saved is not None:
            _load_saved(trained, setup.saved, setup.saved_path)
    copies.to(patcher.load_device).attach_to(patcher)
    if setup.originals_in_host_memory:
        load_leaving_out(patcher, [layer for _, layer in layers])
    return trained


def _load_saved(trained: TrainedWeights, saved: dict[str, torch.Tensor], path: str | None) -> None:
    """Set the copies to a resume file's tensors (a diffusion model file a weights run wrote)."""
    for layer, copy in trained.copies.items():
        set_copy_from(copy, layer, saved, path)


def set_copy_from(copy: LayerCopy, layer: str, saved: dict[str, torch.Tensor], path: str | None) -> None:
    """Set LayerCopy `copy` of the model's layer `layer` to its tensors in a resume file's `saved` (at `path`)."""
    with torch.no_grad():
        for name, tensor in copy.tensors().items():
            key = f"{layer[len(PREFIX) :]}.{name}"
            value = saved.get(key)
            if value is None or value.shape != tensor.shape:
                found = "no such tensor" if value is None else f"shape {tuple(value.shape)}"
                raise EriDiffusionError(
                    f"{path} does not hold this model's {key} of shape {tuple(tensor.shape)} ({found}): it is no "
                    "diffusion model file of a weights run on this model. Resume from one, or start a new run."
                )
            tensor.copy_(value)


def check_weights_trainable(base_model: Any, config: Any) -> None:
    """What a run training `base_model`'s own weights (ComfyUI's BaseModel) with TrainConfig `config` cannot do,
    before anything loads: the text encoder or the adapters' speed paths, and a base loaded quantized, whose
    weights (fp8, GGUF's, NF4's, a mixed-quantized checkpoint's) a saved model would carry rounded."""
    if config.text_encoder_lr > 0 or not config.adapter.train_diffusion_model:
        raise EriDiffusionError(
            "algorithm full trains the diffusion model's own weights alone: set text_encoder_lr to 0 and "
            "train_diffusion_model on, or train the text encoder with an adapter (lora)."
        )
    if config.fp8_compute:
        raise EriDiffusionError(
            "fp8_compute computes the frozen layers under adapters in fp8, and algorithm full trains those layers "
            "themselves: turn fp8_compute off."
        )
    odd = [
        (name, str(tensor.dtype) if type(tensor) in (torch.Tensor, torch.nn.Parameter) else type(tensor).__name__)
        for name, tensor in base_model.diffusion_model.named_parameters()
        if type(tensor) not in (torch.Tensor, torch.nn.Parameter) or tensor.dtype not in TRAINABLE_DTYPES
    ]
    odd += [  # ComfyUI's mixed-precision layers, whose own forward a weight copy cannot stand in for
        (f"{name}.weight", type(module).__qualname__)
        for name, module in base_model.diffusion_model.named_modules()
        if linear_like(module)
    ]
    if odd:
        name, held = odd[0]
        raise EriDiffusionError(
            f"algorithm full trains the weights as loaded, and ComfyUI loaded {len(odd)} of this model's weights "
            f"quantized (e.g. diffusion_model.{name}: {held}), as UNETLoader's weight_dtype fp8, an fp8_scaled or "
            "mixed-quantized checkpoint, a GGUF or an NF4 loader give them: the fine-tune would start from, and save, "
            "rounded weights. Load the model in bf16, fp16 or fp32 (weight_dtype default, a bf16/fp16 file), or train "
            "an adapter (lora) on the quantized model."
        )
