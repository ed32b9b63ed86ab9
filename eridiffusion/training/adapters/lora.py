"""LoRA (and LoCon, its conv form): ΔW = (alpha / rank) · up · down, through LyCORIS's LoConModule."""

from .base import LycorisAdapter, seeded


class LoRA(LycorisAdapter):
    algorithm = "lora"

    def __init__(self, layer, rank, alpha, seed=0):
        from lycoris.modules.locon import LoConModule  # LyCORIS (and bitsandbytes) load when an adapter is made

        with seeded(seed):
            super().__init__(LoConModule("", layer, lora_dim=rank, alpha=alpha))
        self.rank, self.alpha = rank, float(alpha)

    @property
    def scale(self):
        return self.lycoris.scale

    def delta_weight(self):
        """ΔW as ComfyUI builds it from the saved file (tests and export checks only)."""
        up = self.lycoris.lora_up.weight.flatten(1)
        down = self.lycoris.lora_down.weight.flatten(1)
        return (up @ down * self.scale).reshape(self.lycoris.shape)
