"""LoKr: ΔW = scale · w1 ⊗ w2 (Kronecker product), through LyCORIS's LokrModule.

`factor` picks the Kronecker split (-1: as balanced as the layer's sizes allow); `full_rank`
keeps both factors as full matrices. ComfyUI's scale rule matches LyCORIS's: alpha / rank when
a factor is decomposed into _a·_b, else 1.
"""

from .base import LycorisAdapter, layer_kind, seeded


class LoKr(LycorisAdapter):
    algorithm = "lokr"

    @classmethod
    def for_layer(cls, layer, spec, seed):
        conv = layer_kind(layer) == "conv"
        return cls(
            layer,
            spec.conv_rank if conv else spec.rank,
            spec.conv_alpha if conv else spec.alpha,
            seed=seed,
            factor=spec.lokr_factor,
            full_rank=spec.lokr_full_rank,
        )

    def __init__(self, layer, rank, alpha, seed=0, factor=-1, full_rank=False):
        from lycoris.modules.lokr import LokrModule  # LyCORIS (and bitsandbytes) load when an adapter is made

        with seeded(seed):
            super().__init__(LokrModule("", layer, lora_dim=rank, alpha=alpha, factor=factor, full_matrix=full_rank))
