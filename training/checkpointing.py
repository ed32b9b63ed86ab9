"""Gradient checkpointing of a ComfyUI diffusion model's blocks, switched on per model clone.

Each block of the model's top-level block lists (UNet resnets and transformers, DiT blocks)
recomputes its activations in backward instead of storing them. Installed through
ComfyUI's injection mechanism, so the shared modules are restored when the clone unpatches.
"""
import comfy.patcher_extension
import torch
import torch.utils.checkpoint

INJECTION_KEY = "eridiffusion_gradient_checkpointing"


def checkpoint_blocks(diffusion_model):
    """The modules to checkpoint: each entry of every top-level ModuleList, or, where an entry
    is itself a Sequential (a UNet level), its layers (ComfyUI calls those one by one). Only
    composite blocks: single layers (the adapted linears among them) are never wrapped, so
    the adapter bypass and the checkpoint wrapper never sit on the same module."""
    blocks = []
    for child in diffusion_model.children():
        entries = child if isinstance(child, torch.nn.ModuleList) else [child] if isinstance(child, torch.nn.Sequential) else []
        for entry in entries:
            blocks.extend(entry.children() if isinstance(entry, torch.nn.Sequential) else [entry])
    return [b for b in blocks if any(True for _ in b.children()) and any(True for _ in b.parameters())]


class _CheckpointedForward:
    def __init__(self, module):
        self.own_forward = module.__dict__.get("forward")
        self.base = module.forward

    def __call__(self, *args, **kwargs):
        if not torch.is_grad_enabled():
            return self.base(*args, **kwargs)
        return torch.utils.checkpoint.checkpoint(self.base, *args, use_reentrant=False, **kwargs)


def checkpointing_injection(patcher):
    blocks = checkpoint_blocks(patcher.model.diffusion_model)

    def inject(model_patcher):
        for block in blocks:
            if not isinstance(block.__dict__.get("forward"), _CheckpointedForward):
                block.forward = _CheckpointedForward(block)

    def eject(model_patcher):
        for block in blocks:
            forward = block.__dict__.get("forward")
            if isinstance(forward, _CheckpointedForward):
                if forward.own_forward is None:
                    del block.forward
                else:
                    block.forward = forward.own_forward

    patcher.set_injections(INJECTION_KEY, [comfy.patcher_extension.PatcherInjection(inject, eject)])
    return len(blocks)
