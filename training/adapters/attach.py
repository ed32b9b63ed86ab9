"""Attaching adapters to a ComfyUI ModelPatcher clone in bypass form.

The adapters are hooked in through ComfyUI's own injection mechanism
(`ModelPatcher.set_injections`): the layer's forward is wrapped when ComfyUI patches the
model for use and unwrapped when it unpatches it, so the shared modules and their weights
are never changed and other branches of the graph see the plain model.
"""
import itertools
from dataclasses import dataclass

import torch

import comfy.patcher_extension

from ..errors import EriDiffusionError
from .lora import LoRAModule

_INJECTION_IDS = itertools.count()


def _is_attention_linear(name, module, modules_by_name):
    """A linear layer inside an attention block (q/k/v/out projections and their kin)."""
    parts = name.split(".")
    for depth in (1, 2):  # to_q's parent is the attention module; to_out.0's grandparent is
        parent = modules_by_name.get(".".join(parts[:-depth]))
        if parent is not None and "attention" in type(parent).__name__.lower():
            return True
    return False


TARGET_PRESETS = {
    "attention": _is_attention_linear,
    "all-linear": lambda name, module, modules_by_name: True,
}


@dataclass(frozen=True)
class AdapterSpec:
    """What to train: the algorithm, its size and which layers get it."""
    algorithm: str = "lora"
    rank: int = 16
    alpha: float = 16.0
    targets: str = "attention"

    def __post_init__(self):
        if self.algorithm != "lora":
            raise EriDiffusionError(f"adapter algorithm '{self.algorithm}' is not available; use 'lora'.")
        if self.rank < 1:
            raise EriDiffusionError(f"rank must be at least 1 (got {self.rank}).")
        if self.alpha <= 0:
            raise EriDiffusionError(f"alpha must be positive (got {self.alpha}); alpha = rank gives scale 1.")
        if self.targets not in TARGET_PRESETS:
            raise EriDiffusionError(f"targets '{self.targets}' unknown; choose one of {sorted(TARGET_PRESETS)}.")


def target_layers(base_model, spec, allowed_keys):
    """(name, module) of every linear layer of the diffusion model the spec targets, named as in
    the BaseModel's state dict (`diffusion_model.…`). `allowed_keys` are the weight keys a saved
    file can address in ComfyUI; layers outside it would make an unloadable file."""
    modules_by_name = dict(base_model.named_modules())
    wanted = TARGET_PRESETS[spec.targets]
    layers = []
    for name, module in modules_by_name.items():
        if not name.startswith("diffusion_model.") or not isinstance(module, torch.nn.Linear):
            continue
        if f"{name}.weight" in allowed_keys and wanted(name, module, modules_by_name):
            layers.append((name, module))
    if not layers:
        raise EriDiffusionError(f"targets '{spec.targets}' matched no layer of {type(base_model).__name__}; "
                                "try 'all-linear'.")
    return layers


class _BypassForward:
    """Stands in for a layer's forward while adapters are injected: base output plus each
    adapter's term. One per layer, so several adapter sets can stack and leave in any order."""

    def __init__(self, module):
        self.own_forward = module.__dict__.get("forward")  # an instance-level forward to restore
        self.base = module.forward
        self.adapters = []

    def __call__(self, x, *args, **kwargs):
        out = self.base(x, *args, **kwargs)
        for adapter in self.adapters:
            out = out + adapter(x).to(out.dtype)
        return out


def _inject(module, adapter):
    forward = module.__dict__.get("forward")
    if not isinstance(forward, _BypassForward):
        forward = _BypassForward(module)
        module.forward = forward
    if not any(a is adapter for a in forward.adapters):
        forward.adapters.append(adapter)


def _eject(module, adapter):
    forward = module.__dict__.get("forward")
    if not isinstance(forward, _BypassForward):
        return
    forward.adapters = [a for a in forward.adapters if a is not adapter]
    if not forward.adapters:
        if forward.own_forward is None:
            del module.forward
        else:
            module.forward = forward.own_forward


class AdapterSet(torch.nn.Module):
    """The adapters of one training run, keyed by layer name (`diffusion_model.…`)."""

    def __init__(self, spec, adapters):
        super().__init__()
        self.spec = spec
        self.layer_names = list(adapters)
        # ModuleDict keys may not contain dots.
        self.by_layer = torch.nn.ModuleDict({n.replace(".", "/"): a for n, a in adapters.items()})
        self.injection_key = f"eridiffusion_adapters_{next(_INJECTION_IDS)}"

    def items(self):
        return ((n, self.by_layer[n.replace(".", "/")]) for n in self.layer_names)

    def attach_to(self, patcher):
        """Register the bypass injection on `patcher` (a clone); active whenever ComfyUI patches it."""
        modules = dict(patcher.model.named_modules())
        pairs = [(modules[name], adapter) for name, adapter in self.items()]

        def inject(model_patcher):
            self.to(model_patcher.load_device)
            for module, adapter in pairs:
                _inject(module, adapter)

        def eject(model_patcher):
            for module, adapter in pairs:
                _eject(module, adapter)

        patcher.set_injections(self.injection_key, [comfy.patcher_extension.PatcherInjection(inject, eject)])
        return patcher


def attach_adapters(patcher, spec, allowed_keys, seed=0):
    """Create fresh adapters for the layers `spec` targets and attach them to `patcher`."""
    generator = torch.Generator().manual_seed(seed)
    adapters = {}
    for name, module in target_layers(patcher.model, spec, allowed_keys):
        adapters[name] = LoRAModule(module.in_features, module.out_features, spec.rank, spec.alpha,
                                    generator=generator)
    adapter_set = AdapterSet(spec, adapters).to(patcher.load_device)
    adapter_set.attach_to(patcher)
    return adapter_set
