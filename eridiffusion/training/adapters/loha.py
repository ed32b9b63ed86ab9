"""LoHa: ΔW = (alpha / rank) · (w1_a·w1_b) ⊙ (w2_a·w2_b), through LyCORIS's LohaModule."""

from lycoris.modules.loha import LohaModule

from .base import LycorisAdapter, seeded


class LoHa(LycorisAdapter):
    algorithm = "loha"

    def __init__(self, layer, rank, alpha, seed=0):
        with seeded(seed):
            super().__init__(LohaModule("", layer, lora_dim=rank, alpha=alpha))
