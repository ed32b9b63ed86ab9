"""Which of a training step's speed paths a run takes. Each computes what the plain path computes,
so they are not user settings: all are on, and the benchmarks switch one off to measure what it
gains (`TrainConfig(speed=SpeedPaths(fused_rope=False))`)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class SpeedPaths:
    fused_rope: bool = True  # Flux-style RoPE as one Triton kernel per query or key (fused_rope.py)
    # trained text encoders: their encodings stay on the GPU, and SDXL's pooled output joins its
    # size embedding there (model/inputs.py), instead of going by way of ComfyUI's CPU
    encodings_on_device: bool = True
    compute_copies: bool = True  # a bf16 step computes with per-step bf16 copies of the LoRA weights
    fp8_min_macs: int | None = None  # fp8_compute: the smallest product computed in fp8 (None: fp8_products.MIN_MACS)
