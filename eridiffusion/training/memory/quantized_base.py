"""The frozen base held quantized by bitsandbytes for a run (MemoryOptions `base_quantization`, as
QLoRA, OneTrainer and SimpleTuner do): each linear layer of the diffusion model kept on the device as
NF4 (4 bits a weight, per-64 absmax scales) or int8 (per-row scales), dequantized to the activations'
dtype in its forward; the adapters train on top of that forward as on any other.

The MODEL the graph gave is never changed: ComfyUI's loading of the training clone leaves those layers'
weights where they are (comfy_compat.load_leaving_out), the quantized copies are made from them once,
and while the clone is patched each layer's forward computes from its copy (a wrapper taken off again
at ejection). The saved LoRA holds only the adapters, so it loads on the unquantized model."""

import logging
from typing import Any

import comfy.patcher_extension
import torch

from ...comfy_compat import load_leaving_out
from ...errors import EriDiffusionError
from ..adapters.forward_swap import SwappedForward, swap_in, swap_out

INJECTION_KEY = "eridiffusion_quantized_base"
FORMATS = ("none", "nf4", "int8")
NF4_BLOCK = 64  # weights per absmax scale (QLoRA's)


class _Quantized:
    """One layer's weight as bitsandbytes holds it, with its bias on the device."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, fmt: str, device: torch.device):
        import bitsandbytes.functional as bnb

        w = weight.detach().to(device)
        self.fmt, self.shape, self.dtype = fmt, tuple(weight.shape), weight.dtype
        if fmt == "nf4":
            self.data, self.state = bnb.quantize_4bit(w, blocksize=NF4_BLOCK, quant_type="nf4")
        else:
            self.data, self.state, _ = bnb.int8_vectorwise_quant(w.half())
        self.bias = None if bias is None else bias.detach().to(device)
        self.nbytes = self.data.numel() * self.data.element_size()

    def weight(self, dtype: torch.dtype) -> torch.Tensor:
        import bitsandbytes.functional as bnb

        if self.fmt == "nf4":
            return bnb.dequantize_4bit(self.data, self.state).to(dtype)
        return bnb.int8_vectorwise_dequant(self.data, self.state).to(dtype)


class _QuantizedForward(SwappedForward):
    """A quantized layer's forward while the clone is patched: x·Wᵀ + b with W dequantized for the call."""

    def __init__(self, module: torch.nn.Module, quantized: _Quantized):
        super().__init__(module)
        self.quantized = quantized

    def __call__(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        q = self.quantized
        bias = None if q.bias is None else q.bias.to(x.dtype)
        return torch.nn.functional.linear(x, q.weight(x.dtype), bias)


def quantizable_layers(diffusion_model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The diffusion model's plain linear layers with a float weight (ComfyUI's ops' Linear is a
    torch Linear), by name."""
    return [
        (name, m)
        for name, m in diffusion_model.named_modules()
        if isinstance(m, torch.nn.Linear)
        and m.weight is not None
        and m.weight.is_floating_point()
        and m.weight.dim() == 2
    ]


class QuantizedBase:
    """The quantized copies of a training clone's linear layers, and the injection that uses them."""

    def __init__(self, patcher: Any, fmt: str, device: torch.device):
        if fmt not in FORMATS[1:]:
            raise EriDiffusionError(f"base_quantization {fmt!r}: use one of {', '.join(FORMATS)}.")
        self.fmt, self.device = fmt, device
        self.layers = quantizable_layers(patcher.model.diffusion_model)
        self.copies: dict[int, _Quantized] = {}
        load_leaving_out(patcher, [m for _, m in self.layers])
        patcher.set_injections(INJECTION_KEY, [comfy.patcher_extension.PatcherInjection(self._inject, self._eject)])

    def _inject(self, model_patcher: Any) -> None:
        with torch.inference_mode(False), torch.no_grad():
            for _, module in self.layers:
                if id(module) not in self.copies:
                    self.copies[id(module)] = _Quantized(module.weight, module.bias, self.fmt, self.device)
                swap_in(module, _QuantizedForward, self.copies[id(module)])

    def _eject(self, model_patcher: Any) -> None:
        for _, module in self.layers:
            swap_out(module, _QuantizedForward)

    def describe(self) -> str:
        held = sum(m.weight.numel() * m.weight.element_size() for _, m in self.layers)
        return f"{len(self.layers)} linear layers ({held / 2**30:.2f} GiB as loaded) held as {self.fmt} by bitsandbytes"

    def release(self) -> None:
        self.copies.clear()


def quantized_base_for(patcher: Any, config: Any, device: torch.device) -> QuantizedBase | None:
    """The QuantizedBase of training clone `patcher` as config.base_quantization asks, installed (before the
    adapters, whose forwards then wrap the quantized one); None for "none"."""
    if config.base_quantization == "none":
        return None
    base = QuantizedBase(patcher, config.base_quantization, device)
    logging.info(f"EriDiffusion: base_quantization {config.base_quantization}: {base.describe()}")
    return base
