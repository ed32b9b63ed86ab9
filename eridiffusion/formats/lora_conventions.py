"""How other trainers write a LoRA layer's tensors: the names after the layer name (PEFT's lora_A/lora_B,
diffusers' older spellings, ComfyUI's and LyCORIS's own) and where a PEFT-style file keeps its alphas
(adapter_config.json beside it, or diffusers' `lora_adapter_metadata`)."""

import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import EriDiffusionError
from .lora_file import TENSOR_NAMES

# Tensor names after the layer name, in other trainers' spellings -> ComfyUI's name.
TENSOR_SPELLINGS = {
    "lora_A.weight": "lora_down.weight",  # PEFT, diffusers, ai-toolkit, SimpleTuner
    "lora_B.weight": "lora_up.weight",
    "lora_A.default.weight": "lora_down.weight",  # PEFT's state dict with the adapter's name left in
    "lora_B.default.weight": "lora_up.weight",
    "lora.down.weight": "lora_down.weight",  # diffusers' older LoRA layers
    "lora.up.weight": "lora_up.weight",
    "lora_linear_layer.down.weight": "lora_down.weight",
    "lora_linear_layer.up.weight": "lora_up.weight",
    "lora_magnitude_vector": "lora_magnitude_vector",  # PEFT's DoRA magnitude (per output row)
    "lora_magnitude_vector.weight": "lora_magnitude_vector",
    **{name: name for name in TENSOR_NAMES},  # ComfyUI's, kohya's and LyCORIS's own
}
_BY_LENGTH = sorted(TENSOR_SPELLINGS, key=len, reverse=True)
# The prefixes of text-encoder layers (kohya's, diffusers', ComfyUI's).
TEXT_ENCODER_PREFIXES = ("lora_te", "text_encoder", "text_encoders.", "lora_prior_te")
PEFT_ADAPTER_METADATA = "lora_adapter_metadata"  # diffusers' key for the LoraConfig in a file's metadata


PEFT_WEIGHTS = "adapter_model.safetensors"  # what PEFT's save_pretrained writes into its folder
PEFT_CONFIG = "adapter_config.json"  # ... beside its LoraConfig


def peft_weights_file(path: str) -> str:
    """The weights file of a PEFT save_pretrained folder given as `path`, else `path` itself. A folder must
    hold both files save_pretrained writes: the weights and adapter_config.json (their alphas)."""
    if not os.path.isdir(path):
        return path
    inside = os.path.join(path, PEFT_WEIGHTS)
    if not os.path.isfile(inside):
        raise EriDiffusionError(
            f"{path} is a folder without {PEFT_WEIGHTS}; give a LoRA .safetensors file, or a PEFT save_pretrained "
            f"folder (it holds {PEFT_WEIGHTS} and adapter_config.json)."
        )
    if not os.path.isfile(os.path.join(path, PEFT_CONFIG)):
        raise EriDiffusionError(
            f"{path} holds {PEFT_WEIGHTS} but no {PEFT_CONFIG}, which holds its lora_alpha (PEFT's save_pretrained "
            f"writes both): put the config back beside it, or give {inside} itself to read it at scale 1."
        )
    return inside


# What comes before a PEFT module's name in LoRA files' layer names (PEFT's own, diffusers' components, ComfyUI's)
PEFT_MODULE_PREFIXES = ("base_model.model.", "transformer.", "unet.", "diffusion_model.")


def peft_module_name(layer: str) -> str:
    """The module name a PEFT config's patterns address, of a LoRA file's layer name."""
    for prefix in PEFT_MODULE_PREFIXES:
        if layer.startswith(prefix):
            return layer[len(prefix) :]
    return layer


def split_key(key: str) -> tuple[str, str] | None:
    """(layer name, ComfyUI tensor name) of a LoRA file's key, or None when no known tensor name ends it."""
    spelled = next((s for s in _BY_LENGTH if key.endswith("." + s)), None)
    if spelled is None:
        return None
    return key[: -len(spelled) - 1], TENSOR_SPELLINGS[spelled]


@dataclass
class PeftScales:
    """A PEFT LoraConfig's r, lora_alpha and their per-module patterns: the scale of layers whose file
    holds no `.alpha` (scale = lora_alpha / r, or / √r with rsLoRA)."""

    source: str  # where they were read, for the report
    lora_alpha: float | None = None
    alpha_pattern: dict[str, float] = field(default_factory=dict)
    use_rslora: bool = False
    # diffusers' file of several components (unet, text_encoder, text_encoder_2): each one's own config
    components: dict[str, "PeftScales"] = field(default_factory=dict)

    def alpha_of_layer(self, layer: str, rank: int) -> float:
        """ComfyUI's alpha of a file's layer `layer` with `rank`: by its component's config (the first part of
        its name, in a diffusers file of several components), else by this one."""
        component, _, inside = layer.partition(".")
        if component in self.components:
            return self.components[component].alpha_for(inside, rank)
        return self.alpha_for(peft_module_name(layer), rank)

    def alpha_for(self, module: str, rank: int) -> float:
        """ComfyUI's alpha (scale · rank) of PEFT module `module` with `rank`; rank itself (scale 1, what
        diffusers assumes) when no config was found."""
        if self.lora_alpha is None:
            return float(rank)
        alpha = float(self.lora_alpha)
        for pattern in sorted(self.alpha_pattern, key=len, reverse=True):
            if pattern == module or re.fullmatch(rf"(.*\.)?{pattern}", module):
                alpha = float(self.alpha_pattern[pattern])
                break
        return alpha * math.sqrt(rank) if self.use_rslora else alpha


def peft_scales(path: str, metadata: dict[str, str]) -> PeftScales:
    """The PeftScales of a LoRA file: from adapter_config.json beside it (PEFT's save_pretrained), else
    from diffusers' `lora_adapter_metadata` in its metadata, else none found (scale 1)."""
    beside = os.path.join(os.path.dirname(os.path.abspath(path)), PEFT_CONFIG)
    if os.path.isfile(beside):
        try:
            with open(beside, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError) as error:
            raise EriDiffusionError(
                f"{beside} cannot be read as PEFT's adapter config ({error}); fix or remove it (it holds the "
                f"alphas of {os.path.basename(path)})."
            ) from None
        return _scales(config, beside)
    text = metadata.get(PEFT_ADAPTER_METADATA)
    if text:
        try:
            packed = json.loads(text)
        except ValueError as error:
            raise EriDiffusionError(
                f"{path}: its metadata entry {PEFT_ADAPTER_METADATA} is not JSON ({error}); the file was edited."
            ) from None
        return _component_scales(packed, f"metadata {PEFT_ADAPTER_METADATA}")
    return PeftScales("none in the file: scale 1 (alpha = rank), as diffusers assumes")


def _component_scales(packed: Any, source: str) -> PeftScales:
    """diffusers packs each component's config under its name ("unet.lora_alpha", "text_encoder.r",
    "text_encoder_2.r", ...): one component's is the file's; of several, each one's for its layers (the
    diffusion model's also the file's)."""
    if not isinstance(packed, dict):
        return _scales(packed, source)
    configs: dict[str, dict[str, Any]] = {}
    for key, value in packed.items():
        component, _, name = key.partition(".") if "." in key else ("", "", key)
        configs.setdefault(component, {})[name] = value
    if len(configs) == 1:
        return _scales(next(iter(configs.values())), source)
    main = next((c for c in ("transformer", "unet") if c in configs), next(iter(configs)))
    scales = _scales(configs[main], source)
    scales.components = {c: _scales(config, f"{source} ({c})") for c, config in configs.items()}
    return scales


def _scales(config: Any, source: str) -> PeftScales:
    if not isinstance(config, dict) or "lora_alpha" not in config:
        return PeftScales(f"{source} names no lora_alpha: scale 1 (alpha = rank)")
    return PeftScales(
        source, float(config["lora_alpha"]), dict(config.get("alpha_pattern") or {}), bool(config.get("use_rslora"))
    )


def peft_metadata(
    component: str, ranks: dict[str, int], alphas: dict[str, float], target_modules: Iterable[str]
) -> str:
    """diffusers' `lora_adapter_metadata` for one component ("transformer", "unet"): the most common rank
    and alpha, the others as rank_pattern / alpha_pattern keyed by full module names."""
    rank = max(set(ranks.values()), key=list(ranks.values()).count)
    alpha = max(set(alphas.values()), key=list(alphas.values()).count)
    config = {
        "r": rank,
        "lora_alpha": alpha,
        "rank_pattern": {name: r for name, r in ranks.items() if r != rank},
        "alpha_pattern": {name: a for name, a in alphas.items() if a != alpha},
        "target_modules": sorted(target_modules),
        "use_dora": False,
        "use_rslora": False,
        "peft_type": "LORA",
    }
    return json.dumps({f"{component}.{key}": value for key, value in config.items()}, indent=2, sort_keys=True)
