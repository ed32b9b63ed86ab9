"""GLoRA: ΔW = (alpha / rank) · (W·A + B), A = a1·a2 and B = b1·b2 low-rank, through LyCORIS's
GLoRAModule; saved as `a1.weight`, `a2.weight`, `b1.weight`, `b2.weight` and `alpha`, the keys
ComfyUI's weight_adapter loads. The W·A term runs the frozen layer on A·x; its bias is taken back
out, as ComfyUI's merge changes the weight alone."""

from .base import LycorisAdapter, seeded
from .oft import bias_of


class GLoRA(LycorisAdapter):
    algorithm = "glora"

    def __init__(self, layer, rank, alpha, seed=0):
        from lycoris.modules.glora import GLoRAModule  # LyCORIS (and bitsandbytes) load when an adapter is made

        with seeded(seed):
            super().__init__(GLoRAModule("", layer, lora_dim=rank, alpha=alpha))
        self.layer = [layer]  # not a submodule: the frozen layer stays the model's

    def forward(self, x, base):
        out = base(x)
        if self.multiplier == 0:
            return out

        def weight_only(t):
            turned = base(t)
            bias = bias_of(self.layer[0], turned)
            return turned if bias is None else turned - bias

        lycoris, forward = self.lycoris, self.lycoris.org_forward
        lycoris.org_forward = weight_only  # LyCORIS runs the layer on A·x through it
        try:
            return out + lycoris.bypass_forward_diff(x, scale=self.multiplier)
        finally:
            lycoris.org_forward = forward
