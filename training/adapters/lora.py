"""LoRA in bypass form: y = W·x + (alpha / rank) · up(down(x)), the full ΔW never built."""
import math

import torch
import torch.nn.functional as F


class LoRAModule(torch.nn.Module):
    """One LoRA pair for a linear layer. Parameters stay fp32 (master weights); the matmuls
    run in the input's dtype. The scale rule alpha / rank is the one ComfyUI applies when it
    loads `lora_up/lora_down/alpha`, so the saved file reproduces this module exactly."""

    algorithm = "lora"

    def __init__(self, in_features, out_features, rank, alpha, device=None, generator=None):
        super().__init__()
        self.rank = rank
        self.alpha = float(alpha)
        self.down = torch.nn.Parameter(torch.empty(rank, in_features, device=device, dtype=torch.float32))
        self.up = torch.nn.Parameter(torch.zeros(out_features, rank, device=device, dtype=torch.float32))
        # kaiming_uniform_(a=sqrt(5)) as nn.Linear and peft do, drawn from our generator so a seed fixes it.
        bound = 1.0 / math.sqrt(in_features)
        with torch.no_grad():
            self.down.uniform_(-bound, bound, generator=generator)

    @property
    def scale(self):
        return self.alpha / self.rank

    def forward(self, x):
        """The adapter's additive term for input x (same leading shape as the layer's output)."""
        dtype = x.dtype if x.dtype in (torch.float16, torch.bfloat16, torch.float32) else torch.float32
        hidden = F.linear(x.to(dtype), self.down.to(dtype))
        return F.linear(hidden, (self.up * self.scale).to(dtype))

    def delta_weight(self):
        """ΔW as ComfyUI computes it when it merges the saved file (for tests and export checks)."""
        return (self.up @ self.down) * self.scale

    def comfy_tensors(self):
        """The tensors of the saved file, under ComfyUI's names (without the layer prefix)."""
        return {
            "lora_up.weight": self.up.detach(),
            "lora_down.weight": self.down.detach(),
            "alpha": torch.tensor(self.alpha, dtype=torch.float32),
        }
