"""The blocks of a ComfyUI diffusion model: the units gradient checkpointing recomputes, torch.compile
compiles and block swap moves between host and device memory."""

import torch


def model_blocks(diffusion_model):
    """The entries of every top-level block list of `diffusion_model`, in the order the model registers
    them (UNet resnets and transformers, DiT blocks): each entry of a ModuleList, or, where an entry is
    itself a Sequential (a UNet level), its layers (ComfyUI calls those one by one). Only composite
    blocks with weights: single layers (the adapted linears among them) are never listed, so an
    adapter's wrapper and a block's wrapper never sit on the same module."""
    blocks: list[torch.nn.Module] = []
    for child in diffusion_model.children():
        entries = (
            child
            if isinstance(child, torch.nn.ModuleList)
            else [child]
            if isinstance(child, torch.nn.Sequential)
            else []
        )
        for entry in entries:
            blocks.extend(entry.children() if isinstance(entry, torch.nn.Sequential) else [entry])
    return [b for b in blocks if any(True for _ in b.children()) and any(True for _ in b.parameters())]
