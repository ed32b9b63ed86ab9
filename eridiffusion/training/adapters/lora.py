"""LoRA (and LoCon, its conv form): ΔW = (alpha / rank) · up · down, through LyCORIS's LoConModule.

On a linear layer the bypass runs as two matrix products, the second fused with the scale and the
residual add (addmm): a training step of an adapted model launches thousands of these, and
without CUDA graphs the step is paced by launches, not by arithmetic."""

import torch

from .base import LycorisAdapter, seeded


class LoRA(LycorisAdapter):
    algorithm = "lora"

    def __init__(self, layer, rank, alpha, seed=0):
        from lycoris.modules.locon import LoConModule  # LyCORIS (and bitsandbytes) load when an adapter is made

        with seeded(seed):
            super().__init__(LoConModule("", layer, lora_dim=rank, alpha=alpha))
        self.rank, self.alpha = rank, float(alpha)

    def forward(self, x, base):
        lycoris = self.lycoris
        if lycoris.isconv or lycoris.tucker or x.dim() < 2 or self.multiplier == 0:
            return super().forward(x, base)
        out = base(x)
        # y = base(x) + (multiplier · alpha / rank) · (x · downᵀ) · upᵀ, the last product, scale and sum
        # in one kernel; the fp32 adapter weights meet the activations in their dtype
        hidden = torch.nn.functional.linear(x, lycoris.lora_down.weight.to(x.dtype))
        flat = torch.addmm(
            out.reshape(-1, out.shape[-1]),
            hidden.reshape(-1, hidden.shape[-1]).to(out.dtype),
            lycoris.lora_up.weight.t().to(out.dtype),
            alpha=self.scale * self.multiplier,
        )
        return flat.view(out.shape)

    @property
    def scale(self):
        return self.lycoris.scale

    def delta_weight(self):
        """ΔW as ComfyUI builds it from the saved file (tests and export checks only)."""
        up = self.lycoris.lora_up.weight.flatten(1)
        down = self.lycoris.lora_down.weight.flatten(1)
        return (up @ down * self.scale).reshape(self.lycoris.shape)
