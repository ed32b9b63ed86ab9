"""Attaching adapters to a ComfyUI ModelPatcher clone in bypass form.

The adapters are hooked in through ComfyUI's own injection mechanism
(`ModelPatcher.set_injections`): the layer's forward is wrapped when ComfyUI patches the
model for use and unwrapped when it unpatches it, so the shared modules and their weights
are never changed and other branches of the graph see the plain model. The same works for a
CLIP's patcher (text-encoder adapters).
"""

import contextlib
import itertools
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import comfy.patcher_extension
import torch

from ...comfy_compat import prefix_cache_dropped
from ...errors import EriDiffusionError
from ...settings import check_settings, setting
from .base import Adapter, layer_kind, linear_like, quantized, shape_of
from .dora import DoRA
from .forward_swap import SwappedForward, swap_in, swap_out
from .glora import GLoRA
from .layer_selection import select_layers
from .loha import LoHa
from .lokr import LoKr
from .lora import LoRA
from .norm_diff import NormDiff, is_norm
from .oft import BOFT, OFT

ALGORITHMS = {"lora": LoRA, "dora": DoRA, "lokr": LoKr, "loha": LoHa, "oft": OFT, "boft": BOFT, "glora": GLoRA}
# what trains on ComfyUI's quantized layers: the algorithms whose bypass adds a product needing the layer's sizes alone
LINEAR_LIKE_ALGORITHMS = ("lora", "loha", "lokr")
FULL = "full"  # full fine-tuning: no adapter, the chosen layers' own weights train (training/trained/weights.py)
_INJECTION_IDS = itertools.count()


def _inside(name, modules_by_name, words, depth):
    """Whether one of the `depth` nearest ancestors of `name` has a class name containing a word."""
    parts = name.split(".")
    for up in range(1, depth + 1):
        parent = modules_by_name.get(".".join(parts[:-up]))
        if parent is not None and any(w in type(parent).__name__.lower() for w in words):
            return True
    return False


def _is_attention_linear(name, module, modules_by_name):
    """A linear layer inside an attention block (q/k/v/out projections and their kin)."""
    # to_q's parent is the attention module; to_out.0's grandparent is
    return _inside(name, modules_by_name, ("attention",), 2)


def _is_block_linear(name, module, modules_by_name):
    """A linear layer of one of the model's repeated blocks (the entries of a top-level
    ModuleList: double_blocks, layers, transformer_blocks, …), not an embedder or final layer."""
    parts = name.split(".")
    return len(parts) > 3 and isinstance(modules_by_name.get(".".join(parts[:2])), torch.nn.ModuleList)


TARGET_PRESETS = {
    "attention": _is_attention_linear,
    "blocks": _is_block_linear,
    "all-linear": lambda name, module, modules_by_name: True,
}
AUTO_TARGETS = "auto"  # the model family's default preset (training/model/families.py)
LAYER_PATTERN = {"group": "adapter", "regex": True, "optional": True}  # include's and exclude's declaration


def _is_resnet_conv(name, module, modules_by_name):
    """A convolution of a UNet resnet block or a down/upsampler: what LoCon adapts."""
    return _inside(name, modules_by_name, ("resblock", "downsample", "upsample"), 2)


@dataclass(frozen=True)
class AdapterSpec:
    """What to train: the algorithm, its size and which layers get it."""

    algorithm: str = setting(
        "lora",
        "lora; dora (+ magnitude); lokr; loha; oft, boft (the weight rotated: rank sizes the blocks, alpha unused); "
        "glora (W·A + B); full: the layers' own weights (full fine-tuning at ~1e-5: rank unused; SaveFineTune).",
        choices=(*ALGORITHMS, FULL),
        group="trainer",
    )
    rank: int = setting(16, "Adapter rank (its size).", minimum=1, maximum=1024, group="trainer")
    alpha: float = setting(
        16.0,
        "The adapter is scaled by alpha / rank (LoKr with full factors: 1).",
        minimum=0.01,
        maximum=1024.0,
        step=0.5,
        group="trainer",
    )
    targets: str = setting(
        AUTO_TARGETS,
        "auto: the model family's default (UNets: attention; transformers: blocks). "
        "attention: q/k/v/out projections; blocks: every linear layer of the transformer blocks; "
        "all-linear: every linear layer.",
        choices=(AUTO_TARGETS,) + tuple(TARGET_PRESETS),
        group="adapter",
    )
    conv_rank: int = setting(
        0,
        "> 0 also adapts the UNet's resnet convolutions (LoCon) at this rank.",
        minimum=0,
        maximum=1024,
        group="adapter",
    )
    conv_alpha: float = setting(
        1.0, "Alpha of the conv adapters.", minimum=0.01, maximum=1024.0, step=0.5, group="adapter"
    )
    lokr_factor: int = setting(
        -1,
        "LoKr only: Kronecker factor (-1: as balanced as the layer allows).",
        minimum=-1,
        maximum=64,
        group="adapter",
    )
    lokr_full_rank: bool = setting(
        False, "LoKr only: keep both Kronecker factors whole (no low-rank split).", group="adapter"
    )
    include: str = setting(
        "",
        "Regular expression: of the layers `targets` picks, adapt only those whose name matches (searched), "
        "e.g. 'attn2' (SD cross-attention) or 'output_blocks|middle_block'. Empty: all of them.",
        **LAYER_PATTERN,
    )
    exclude: str = setting(
        "",
        "Regular expression: leave out the targeted layers whose name matches, e.g. 'ff\\.net' or "
        "'single_blocks\\.(3[0-7])\\.'. Empty: none.",
        **LAYER_PATTERN,
    )
    train_norms_and_biases: bool = setting(
        False,
        "Also train the biases of the adapted layers and the weight and bias of every norm layer the file can "
        "address, as plain differences (as ComfyUI 0.28's own trainer does; saved as diff / diff_b, which stock "
        "LoraLoader applies).",
        group="adapter",
        optional=True,
    )

    text_encoders: str = setting(
        "",
        "With text_encoder_lr > 0: the text encoders that train, as the CLIP names them (clip_l, t5xxl, qwen25_7b, "
        "...), e.g. 't5xxl' on Flux: T5 and not CLIP-L. Empty: the CLIP encoders, or all where none is CLIP.",
        group="adapter",
        optional=True,
    )
    train_diffusion_model: bool = setting(
        True,
        "Off: the text encoders alone train (text_encoder_lr > 0), the diffusion model gets no adapters.",
        group="adapter",
        optional=True,
    )

    def __post_init__(self):
        check_settings(self, "adapter")

    def build(self, layer: torch.nn.Module, seed: int) -> Adapter:
        """A fresh adapter for `layer`: the algorithm's for a linear or conv layer (and its bias, where
        biases train), a NormDiff for a norm layer."""
        if is_norm(layer):
            return NormDiff(layer)
        sized = shape_of(layer) if linear_like(layer) else layer  # (its weight may be quantized)
        adapter = ALGORITHMS[self.algorithm].for_layer(sized, self, seed)
        if self.train_norms_and_biases and getattr(layer, "bias", None) is not None:
            adapter.train_bias_of(layer)
        return adapter


def target_layers(root, spec, allowed_keys, prefix="diffusion_model."):
    """(name, module) of every layer under `prefix` that `spec` targets, named as in `root`'s state
    dict. `allowed_keys` are the weight keys a saved file can address in ComfyUI; layers outside
    it would make an unloadable file."""
    if spec.targets not in TARGET_PRESETS:
        raise EriDiffusionError(f"targets '{spec.targets}' must be resolved to a preset before attaching adapters.")
    modules_by_name = dict(root.named_modules())
    wanted = TARGET_PRESETS[spec.targets]
    layers = []
    for name, module in modules_by_name.items():
        if not name.startswith(prefix) or f"{name}.weight" not in allowed_keys:
            continue
        kind = layer_kind(module)
        if kind == "linear" and wanted(name, module, modules_by_name):
            layers.append((name, module))
        elif (
            kind == "conv"
            and spec.conv_rank > 0
            and isinstance(module, torch.nn.Conv2d)
            and _is_resnet_conv(name, module, modules_by_name)
        ):
            layers.append((name, module))
        elif spec.train_norms_and_biases and is_norm(module):
            layers.append((name, module))
    if not layers:
        hint = "" if spec.targets == "all-linear" else "; try 'all-linear'"
        raise EriDiffusionError(f"targets '{spec.targets}' matched no layer of {type(root).__name__}{hint}.")
    layers = select_layers(layers, spec.include, spec.exclude)
    check_linear_like(layers, spec.algorithm)
    return layers


def check_linear_like(layers, algorithm):
    """Refuse an algorithm that needs the layer's weight (DoRA's norm, OFT's rotation of it, GLoRA's
    product with it) on layers that are not torch's Linear: ComfyUI's quantized layers."""
    odd = [(name, module) for name, module in layers if linear_like(module)]
    if not odd or algorithm in LINEAR_LIKE_ALGORITHMS:
        return
    name, module = odd[0]
    what = "quantized" if quantized(module) else "mixed-precision"
    raise EriDiffusionError(
        f"this model's linear layers are ComfyUI's {what} layers ({len(odd)} of those targeted, e.g. {name}: "
        f"{type(module).__qualname__}), as an fp8_scaled or mixed-quantized checkpoint loads; {algorithm} needs "
        f"each layer's weight, which those keep quantized: train {', '.join(LINEAR_LIKE_ALGORITHMS)} on them, or "
        "load the model in bf16 (a bf16 checkpoint, or UNETLoader's weight_dtype fp8_e4m3fn on a bf16 file)."
    )


class _LayerForward:
    """The layer's own forward, as the innermost `base` an adapter gets; `layer` is there when
    that forward is its class's (nothing else replaced it), so an adapter may compute the frozen
    product itself (adapters/lora_linear.py)."""

    __slots__ = ("forward", "layer")

    def __init__(self, forward, layer):
        self.forward, self.layer = forward, layer

    def __call__(self, x):
        return self.forward(x)


class _BypassForward(SwappedForward):
    """Stands in for a layer's forward while adapters are injected: each adapter wraps the
    forward below it. One per layer, so several adapter sets can stack and leave in any order."""

    def __init__(self, module):
        super().__init__(module)
        self.adapters = []
        self.layer_forward = _LayerForward(self.base, module if self.replaced is None else None)

    def __call__(self, x, *args, **kwargs):
        if len(self.adapters) == 1 and not args and not kwargs:  # the training case: no closures
            adapter = self.adapters[0]
            if adapter.frozen_products is not None:  # fp8_compute: the frozen layer's product in fp8
                return adapter(x, adapter.frozen_products.forward_of(self.layer_forward, x))
            return adapter(x, self.layer_forward)

        def forward(inp):
            return self.base(inp, *args, **kwargs)

        for adapter in self.adapters:
            forward = (lambda a, below: lambda inp: a(inp, below))(adapter, forward)
        return forward(x)


def _is_on(tensor, device):
    """Whether `tensor` is on `device` (a device without an index: any of its type)."""
    return tensor.device.type == device.type and device.index in (None, tensor.device.index)


def inject_adapter(module, adapter):
    forward = swap_in(module, _BypassForward)
    if not any(a is adapter for a in forward.adapters):
        forward.adapters.append(adapter)


def eject_adapter(module, adapter):
    forward = module.__dict__.get("forward")
    if isinstance(forward, _BypassForward):
        forward.adapters = [a for a in forward.adapters if a is not adapter]
        if not forward.adapters:
            swap_out(module, _BypassForward)


class AdapterSet(torch.nn.Module):
    """The adapters of one training run, keyed by layer name as in the patched model's state dict."""

    def __init__(self, spec, adapters):
        super().__init__()
        self.spec = spec
        self.layer_names = list(adapters)
        # ModuleDict keys may not contain dots.
        self.by_layer = torch.nn.ModuleDict({n.replace(".", "/"): a for n, a in adapters.items()})
        self.injection_key = f"eridiffusion_adapters_{next(_INJECTION_IDS)}"

    def items(self):
        return ((n, self.by_layer[n.replace(".", "/")]) for n in self.layer_names)

    def set_multiplier(self, multiplier):
        for _, adapter in self.items():
            adapter.multiplier = multiplier

    @contextlib.contextmanager
    def bypassed(self):
        """The model as without these adapters for the block (their multiplier at 0), then as before."""
        before = [adapter.multiplier for _, adapter in self.items()]
        self.set_multiplier(0.0)
        try:
            yield
        finally:
            for (_, adapter), multiplier in zip(self.items(), before):
                adapter.multiplier = multiplier

    @contextlib.contextmanager
    def frozen_products(self, products):
        """The block runs with the frozen layers under these adapters computed by `products` (an
        fp8_products.Fp8Products, which keeps its fp8 weights from block to block: CUDA graphs
        replay them), then as before. None: the block runs as it is."""
        if products is None:
            yield
            return
        for _, adapter in self.items():
            adapter.frozen_products = products
        try:
            yield
        finally:
            for _, adapter in self.items():
                adapter.frozen_products = None

    def attach_to(self, patcher):
        """Register the bypass injection on `patcher` (a clone); active whenever ComfyUI patches it."""
        modules = dict(patcher.model.named_modules())
        pairs = [(modules[name], adapter) for name, adapter in self.items()]
        tensors = [*self.parameters(), *self.buffers()]

        def inject(model_patcher):
            device = torch.device(model_patcher.load_device)
            if not all(_is_on(t, device) for t in tensors):  # (Module.to walks every module even then)
                with torch.inference_mode(False):  # ComfyUI loads under inference mode; these must stay trainable
                    self.to(device)
            for module, adapter in pairs:
                inject_adapter(module, adapter)

        def eject(model_patcher):
            for module, adapter in pairs:
                eject_adapter(module, adapter)

        patcher.set_injections(self.injection_key, [comfy.patcher_extension.PatcherInjection(inject, eject)])
        # the adapters change while training and set this patcher apart from the others of its modules:
        # activations the host model caches across calls (HiDream-O1's text prefix) must not outlive a call
        return prefix_cache_dropped(patcher)


def layer_width(layer):
    """The most independent directions a low-rank update of `layer` can hold: min(out, in) of its
    weight seen as a matrix (a convolution's input is in_channels x kernel size)."""
    shape = layer.weight.shape  # (the shape alone: a quantized weight is not indexed)
    return min(shape[0], math.prod(shape[1:]))


def narrow_layers(adapter_set, root):
    """[(layer name, its width)] of the layers whose LoRA/DoRA/LoHa rank is above their width: the
    extra rank only adds parameters. (LoKr's rank splits a Kronecker factor, OFT's and BOFT's sizes their
    blocks: they mean no such thing.)"""
    if adapter_set.spec.algorithm in ("lokr", "oft", "boft"):
        return []
    modules = dict(root.named_modules())
    narrow = []
    for name, _ in adapter_set.items():
        layer = modules[name]
        if is_norm(layer):
            continue
        rank = adapter_set.spec.conv_rank if layer_kind(layer) == "conv" else adapter_set.spec.rank
        if rank > layer_width(layer):
            narrow.append((name, layer_width(layer)))
    return narrow


def warn_narrow_layers(spec, narrow):
    """One warning naming the layers (from narrow_layers) whose rank is above their width."""
    if not narrow:
        return
    names = ", ".join(f"{name} ({width})" for name, width in narrow[:5]) + (", …" if len(narrow) > 5 else "")
    logging.warning(
        f"EriDiffusion: rank {spec.rank} (conv_rank {spec.conv_rank}) is larger than the width of "
        f"{len(narrow)} adapted layers: {names}. An adapter of a layer cannot use more rank than its "
        f"width, so the rest only adds parameters to the file; lower the rank to "
        f"{min(width for _, width in narrow)} or less."
    )


def attach_adapters(
    patcher: Any, spec: AdapterSpec, allowed_keys: Iterable[str], seed: int = 0, prefix: str = "diffusion_model."
) -> "AdapterSet":
    """Create fresh adapters for the layers `spec` targets and attach them to `patcher`."""
    adapters = {
        name: spec.build(module, seed * 100003 + index)
        for index, (name, module) in enumerate(target_layers(patcher.model, spec, allowed_keys, prefix))
    }
    adapter_set = AdapterSet(spec, adapters).to(patcher.load_device)
    adapter_set.attach_to(patcher)
    return adapter_set
