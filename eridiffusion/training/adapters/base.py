"""The shape every adapter has: a small module that, given a layer's input and the frozen
layer itself, returns the adapted output; plus its tensors under ComfyUI's file names.

LoRA, LoHa and LoKr wrap LyCORIS modules (their parameterization is the one ComfyUI applies
when it loads `lora_*`, `hada_*` and `lokr_*` keys); only LyCORIS's bypass term is used, so the
layer is never rebuilt and LyCORIS never hooks into the model.
"""

import os
from collections.abc import Callable
from typing import Any

import torch

# LyCORIS picks fused Triton kernels (and torch.compile) per call on CUDA unless told otherwise.
# On an H100 with full-size SDXL that "auto" choice ran a training step in 1.28 s against 0.62 s
# for plain eager ops (bench/results/2026-11-23_train_speed_h100.json), so eager is the default
# here; setting LYCORIS_KERNEL_BACKEND yourself still wins.
os.environ.setdefault("LYCORIS_KERNEL_BACKEND", "torch")


class Adapter(torch.nn.Module):
    """Base of all adapters: what the trainer, the file format and resuming rely on. `multiplier`
    plays the role of LoraLoader's strength."""

    algorithm = ""
    stock_loader_note: str | None = None  # what a run of this algorithm warns of stock ComfyUI's loading of its file

    def __init__(self) -> None:
        super().__init__()
        self.multiplier = 1.0
        # fp8_products.Fp8Products while a run computes the frozen layers in fp8 (fp8_compute), else None
        self.frozen_products = None
        # the layer's bias trained as a difference (norm_diff.py), where the run trains biases, else None
        self.bias_diff: torch.nn.Parameter | None = None
        self.bias_is_conv = False

    def train_bias_of(self, layer: torch.nn.Module) -> None:
        """Also train `layer`'s bias, as a difference saved under `diff_b`."""
        self.bias_diff = torch.nn.Parameter(torch.zeros(layer.bias.shape, dtype=torch.float32))
        self.bias_is_conv = layer_kind(layer) == "conv"

    def __call__(self, x: torch.Tensor, base: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        out = super().__call__(x, base)
        if self.bias_diff is None or self.multiplier == 0:
            return out
        return out + self.multiplier * channel_view(self.bias_diff, out, self.bias_is_conv)

    def saved_tensors(self) -> dict[str, torch.Tensor]:
        """comfy_tensors, with the bias difference where the adapter trains one."""
        tensors = self.comfy_tensors()
        if self.bias_diff is not None:
            tensors["diff_b"] = self.bias_diff.detach()
        return tensors

    @classmethod
    def for_layer(cls, layer: torch.nn.Module, spec: Any, seed: int) -> "Adapter":
        """A fresh adapter of `layer` (linear or conv) as AdapterSpec `spec` asks for it."""
        conv = layer_kind(layer) == "conv"
        algorithm: Callable[..., Adapter] = cls  # each algorithm's class takes (layer, rank, alpha, seed)
        return algorithm(
            layer, spec.conv_rank if conv else spec.rank, spec.conv_alpha if conv else spec.alpha, seed=seed
        )

    def forward(self, x: torch.Tensor, base: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The layer's output with this adapter applied; `base` computes the frozen layer."""
        raise NotImplementedError

    def comfy_tensors(self) -> dict[str, torch.Tensor]:
        """{name in a ComfyUI LoRA file, after the layer's prefix: tensor} of this adapter."""
        raise NotImplementedError

    def tensor_targets(self) -> dict[str, torch.Tensor]:
        """{name as comfy_tensors: the parameter or buffer a saved tensor of that name is loaded into}."""
        raise NotImplementedError

    def load_comfy_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        """Set this adapter from tensors read back from a saved file (names as comfy_tensors)."""
        targets = self.tensor_targets()
        if self.bias_diff is not None:
            targets = {**targets, "diff_b": self.bias_diff}
        missing = sorted(set(targets) - set(tensors))
        if missing:
            raise KeyError(f"missing {missing}")
        with torch.no_grad():
            for name, target in targets.items():
                target.copy_(tensors[name].to(target.dtype).reshape(target.shape))


class LycorisAdapter(Adapter):
    """An additive adapter built on a LyCORIS module: output = base(x) + multiplier · Δ(x)."""

    def __init__(self, lycoris_module):
        super().__init__()
        self.lycoris = lycoris_module

    def delta(self, x, scale=1.0):
        return self.lycoris.bypass_forward_diff(x, scale=scale)

    def forward(self, x, base):
        if self.multiplier == 0:  # bypassed (strength 0, or the base prediction of preservation)
            return base(x)
        return base(x) + self.delta(x, self.multiplier)

    def comfy_tensors(self):
        return {name: t.detach() for name, t in self.lycoris.custom_state_dict().items()}

    def tensor_targets(self):
        targets = {}
        for name in self.lycoris.custom_state_dict():
            obj = self.lycoris
            for part in name.split("."):
                obj = getattr(obj, part)
            targets[name] = obj
        return targets


def channel_view(bias, out, conv):
    """`bias` (channels) shaped to broadcast over output `out`: channels last, or second for convs."""
    bias = bias.to(out.dtype)
    return bias.view(1, -1, *([1] * (out.dim() - 2))) if conv else bias


def seeded(seed):
    """Run a block with torch's global RNG seeded and restored afterwards: LyCORIS draws its
    initial values from the global generator, and a run's seed must fix them."""

    class _Seeded:
        def __enter__(self):
            self.fork = torch.random.fork_rng(devices=[])
            self.fork.__enter__()
            # the CPU generator alone (LyCORIS makes its tensors there): torch.manual_seed also seeds every
            # GPU's, and XPU's lazily with a stack trace, 0.8 ms an adapter (0.5 s of SDXL's 560 layers)
            torch.default_generator.manual_seed(seed)

        def __exit__(self, *exc):
            return self.fork.__exit__(*exc)

    return _Seeded()


def layer_kind(layer):
    if isinstance(layer, torch.nn.Linear) or linear_like(layer):
        return "linear"
    if isinstance(layer, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)):
        return "conv"
    return None


def linear_like(layer):
    """Whether `layer` computes as a linear layer without being torch's Linear: ComfyUI 0.28's
    mixed-precision ops (an fp8_scaled or mixed-quantized checkpoint as it loads) make modules with
    in_features, out_features and an (out, in) weight, most of them quantized (a tensor subclass
    holding the quantized data and its scales), whose own forward dequantizes or multiplies in the
    quantized format. An adapter adds its product to that forward's output."""
    if isinstance(layer, (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)):
        return False
    weight, out, inp = (getattr(layer, n, None) for n in ("weight", "out_features", "in_features"))
    return isinstance(weight, torch.Tensor) and isinstance(out, int) and tuple(weight.shape) == (out, inp)


def quantized(layer):
    """Whether `layer`'s weight is a quantized tensor (a subclass, not a plain tensor)."""
    weight = getattr(layer, "weight", None)
    return isinstance(weight, torch.Tensor) and type(weight) not in (torch.Tensor, torch.nn.Parameter)


def shape_of(layer):
    """A weightless Linear of `layer`'s shape, for an adapter that only needs its sizes (its base output
    is always the layer's own forward)."""
    return torch.nn.Linear(layer.in_features, layer.out_features, bias=False, device="meta")
