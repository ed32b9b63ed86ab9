"""Trainable adapters (one module per algorithm) and how they attach to a ComfyUI model
without touching its weights."""

from .attach import (
    ALGORITHMS,
    AUTO_TARGETS,
    TARGET_PRESETS,
    AdapterSet,
    AdapterSpec,
    attach_adapters,
    narrow_layers,
    warn_narrow_layers,
)

__all__ = [
    "ALGORITHMS",
    "AUTO_TARGETS",
    "TARGET_PRESETS",
    "AdapterSet",
    "AdapterSpec",
    "attach_adapters",
    "narrow_layers",
    "warn_narrow_layers",
]
