"""LoRA (and LoCon, its conv form): ΔW = (alpha / rank) · up · down, through LyCORIS's LoConModule.

On a linear layer the adapted layer runs as one autograd node (lora_linear.py): a training step of
an adapted model runs thousands of them, and without CUDA graphs the step is paced by the CPU's
work per layer, not by arithmetic."""

from typing import Any

import torch

from .base import LycorisAdapter, seeded
from .lora_linear import lora_linear


class LoRA(LycorisAdapter):
    algorithm = "lora"

    def __init__(self, layer, rank, alpha, seed=0):
        from lycoris.modules.locon import LoConModule  # LyCORIS (and bitsandbytes) load when an adapter is made

        with seeded(seed):
            super().__init__(LoConModule("", layer, lora_dim=rank, alpha=alpha))
        self.rank, self.alpha = rank, float(alpha)
        self.linear = not (self.lycoris.isconv or self.lycoris.tucker)
        # (down, up) in the compute dtype while a training step uses compute_copies.ComputeCopies,
        # and then the shared_input.SharedInputGroup (or CallRecorder) of this layer, if any
        self.compute_weights: tuple[torch.Tensor, torch.Tensor] | None = None
        self.input_group: Any = None

    def linear_weights(self):
        """[down, up] of a linear LoRA (what ComputeCopies copies), else None."""
        return [self.lycoris.lora_down.weight, self.lycoris.lora_up.weight] if self.linear else None

    def forward(self, x, base):
        if not self.linear or x.dim() < 2 or self.multiplier == 0:
            return super().forward(x, base)
        lycoris = self.lycoris
        weights = self.compute_weights
        if weights is None or weights[0].dtype != x.dtype:
            weights = lycoris.lora_down.weight, lycoris.lora_up.weight
        elif self.input_group is not None:
            out = self.input_group.output(self, x, base)
            if out is not None:
                return out
        return lora_linear(x, base, *weights, lycoris.scale * self.multiplier)

    @property
    def scale(self):
        return self.lycoris.scale

    def delta_weight(self):
        """ΔW as ComfyUI builds it from the saved file (tests and export checks only)."""
        up = self.lycoris.lora_up.weight.flatten(1)
        down = self.lycoris.lora_down.weight.flatten(1)
        return (up @ down * self.scale).reshape(self.lycoris.shape)
