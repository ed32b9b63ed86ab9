"""Trainable adapters and how they attach to a ComfyUI model without touching its weights."""
from .lora import LoRAModule
from .attach import AdapterSet, AdapterSpec, attach_adapters, TARGET_PRESETS

__all__ = ["LoRAModule", "AdapterSet", "AdapterSpec", "attach_adapters", "TARGET_PRESETS"]
