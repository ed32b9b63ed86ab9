"""LoKr: ΔW = scale · w1 ⊗ w2 (Kronecker product), through LyCORIS's LokrModule.

`factor` picks the Kronecker split (-1: as balanced as the layer's sizes allow); `full_rank`
keeps both factors as full matrices. ComfyUI's scale rule matches LyCORIS's: alpha / rank when
a factor is decomposed into _a·_b, else 1.
"""
from lycoris.modules.lokr import LokrModule

from .base import LycorisAdapter, seeded


class LoKr(LycorisAdapter):
    algorithm = "lokr"

    def __init__(self, layer, rank, alpha, seed=0, factor=-1, full_rank=False, **options):
        with seeded(seed):
            super().__init__(LokrModule("", layer, lora_dim=rank, alpha=alpha, factor=factor,
                                        full_matrix=full_rank))
