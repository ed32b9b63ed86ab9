"""LoHa: ΔW = (alpha / rank) · (w1_a·w1_b) ⊙ (w2_a·w2_b), through LyCORIS's LohaModule."""

from .base import LycorisAdapter, seeded


class LoHa(LycorisAdapter):
    algorithm = "loha"

    def __init__(self, layer, rank, alpha, seed=0):
        from lycoris.modules.loha import LohaModule  # LyCORIS (and bitsandbytes) load when an adapter is made

        with seeded(seed):
            super().__init__(LohaModule("", layer, lora_dim=rank, alpha=alpha))
