"""The VRAM budget's plan: which of the model's blocks pass through block swap's ring (block_swap.py).

A run with `vram_budget_gib` starts with every block in the ring, the least device memory block swap
can give, and measures its first step: the peak memory at this resolution, frames and batch, with the
adapters, their gradients and the optimizer's state, and how many positions (tokens, pixels) each
block computes over. Before the second step it holds on the device as many blocks as the rest of the
budget takes. A block's compute is about its positions times its weights, while its copy is its
weights: so the ring takes the blocks that compute over the most positions (a UNet's outer levels,
not its inner ones, whose large weights see a 32×32 grid at 1024²), and among equals (a DiT's blocks)
spreads them evenly, so each copy hides behind the compute of the blocks before it. `blocks_to_swap`
fixes the ring instead. A budget that even the weights alone cannot meet (every block in the ring) is
refused before any model loads, naming the smallest budget that could; one below the first step's
measured peak, after it."""

import logging

import torch

from ...errors import EriDiffusionError
from ..model.blocks import model_blocks
from .block_swap import SLOTS

GIB = 2**30
# Room the plan leaves inside the budget: the caching allocator's fragmentation, and the memory a
# bucket larger than the first step's takes beyond it.
MARGIN_GIB = 0.75
MARGIN_SHARE = 0.06


def margin_bytes(budget_bytes):
    return max(MARGIN_GIB * GIB, MARGIN_SHARE * budget_bytes)


def spread(count, n):
    """`count` of the positions 0..n-1, spread evenly (none, some, or all)."""
    if count <= 0:
        return []
    return sorted({min(n - 1, int((i + 0.5) * n / count)) for i in range(count)})


def _tensor_bytes(module):
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


def weights_in_blocks(diffusion_model):
    """(bytes of each block's weights in model_blocks order, bytes of the other weights)."""
    blocks = [_tensor_bytes(b) for b in model_blocks(diffusion_model)]
    return blocks, _tensor_bytes(diffusion_model) - sum(blocks)


def smallest_weights_bytes(diffusion_model):
    """The device bytes the weights take with every block in the ring: the other weights and the slots."""
    blocks, other = weights_in_blocks(diffusion_model)
    return other + SLOTS * max(blocks, default=0)


def check_vram_budget(config, diffusion_model, device):
    """vram_budget_gib / blocks_to_swap the model and the device can take, before the model loads."""
    if not swaps_blocks(config):
        return
    blocks, _ = weights_in_blocks(diffusion_model)
    if not blocks:
        raise EriDiffusionError(
            f"{type(diffusion_model).__name__} has no block lists for block swap: set vram_budget_gib and "
            "blocks_to_swap to 0."
        )
    if config.blocks_to_swap > len(blocks):
        raise EriDiffusionError(
            f"blocks_to_swap {config.blocks_to_swap} is more than the {len(blocks)} blocks this model has: set at "
            f"most {len(blocks)}."
        )
    if config.vram_budget_gib <= 0:
        return
    if device.type != "cuda":
        raise EriDiffusionError(
            f"vram_budget_gib plans GPU memory, and this run trains on {device}: set vram_budget_gib to 0."
        )
    budget = config.vram_budget_gib * GIB
    smallest = smallest_weights_bytes(diffusion_model)
    if smallest + margin_bytes(budget) > budget:
        need = max(smallest + MARGIN_GIB * GIB, smallest / (1 - MARGIN_SHARE))
        raise EriDiffusionError(
            f"vram_budget_gib {config.vram_budget_gib:g} is below what this model's weights alone take with every "
            f"one of its {len(blocks)} blocks in CPU memory ({smallest / GIB:.2f} GiB: the weights outside the "
            f"blocks and {SLOTS} blocks' room), with the plan's margin: set vram_budget_gib to at least "
            f"{need / GIB + 0.5:.1f}, more for the activations (or load the model in fp8)."
        )


def swaps_blocks(config):
    """Whether block swap places the model's blocks (vram_budget_gib or blocks_to_swap set)."""
    return config.vram_budget_gib > 0 or config.blocks_to_swap > 0


def check_swap_settings(config):
    """The settings block swap (vram_budget_gib, blocks_to_swap) cannot run with, refused naming the fix."""
    swapping = swaps_blocks(config)
    if swapping and not config.gradient_checkpointing:
        raise EriDiffusionError(
            "vram_budget_gib and blocks_to_swap copy the model's blocks in while it computes, which only "
            "saves memory with gradient_checkpointing on (else backward keeps every block's weights): turn "
            "gradient_checkpointing on."
        )
    if config.vram_budget_gib > 0 and config.blocks_to_swap > 0:
        raise EriDiffusionError(
            "blocks_to_swap fixes what vram_budget_gib would plan: set one of them, the other to 0."
        )
    if swapping and config.weights_vram_gib > 0:
        raise EriDiffusionError(
            "weights_vram_gib streams the weights through ComfyUI's partial loading, vram_budget_gib and "
            "blocks_to_swap through block swap: set weights_vram_gib to 0 (the budget plans it all)."
        )
    if swapping and config.torch_compile:
        raise EriDiffusionError(
            "torch_compile compiles each block with its weights' addresses, which block swap changes every "
            "step: turn torch_compile off, or set vram_budget_gib and blocks_to_swap to 0."
        )
    if swapping and config.fp8_compute:
        raise EriDiffusionError(
            "fp8_compute keeps an fp8 copy of each adapted layer's weight on the GPU, which block swap keeps in "
            "CPU memory: turn fp8_compute off, or set vram_budget_gib and blocks_to_swap to 0."
        )


def initial_ring(config, n):
    """The ring's positions for the first step: blocks_to_swap's, spread, or every block under a budget."""
    if config.blocks_to_swap > 0:
        return spread(config.blocks_to_swap, n)
    return list(range(n))


def ring_of(count, computed_over=None):
    """`count` of the blocks for the ring: those computing over the most positions (`computed_over`,
    per block; None: all alike), spread evenly among those alike."""
    n = len(computed_over) if computed_over is not None else None
    if computed_over is None or count <= 0:
        return spread(count, n) if n is not None else []
    chosen: list[int] = []
    for level in sorted(set(computed_over), reverse=True):
        members = [p for p, c in enumerate(computed_over) if c == level]
        take = min(len(members), count - len(chosen))
        chosen += [members[i] for i in spread(take, len(members))]
        if len(chosen) == count:
            break
    return sorted(chosen)


def ring_for(sizes, peak, slots_bytes, budget, computed_over=None):
    """The ring (positions) that keeps the fewest bytes in host memory (then the fewest blocks) while the
    step's `peak` (bytes, measured with every block in the ring and `slots_bytes` of slots) stays within
    `budget` with its margin: each block held adds its bytes, the slots change with the largest block
    left in the ring. The ring of each size is ring_of's (the blocks computing over the most positions,
    spread); every size is tried, as a smaller ring of other blocks may hold more bytes."""
    n, margin = len(sizes), margin_bytes(budget)
    best, best_bytes = list(range(n)), sum(sizes)
    for count in range(n - 1, -1, -1):
        candidate = spread(count, n) if computed_over is None else ring_of(count, computed_over)
        slots = SLOTS * max((sizes[p] for p in candidate), default=0)
        held = sum(size for p, size in enumerate(sizes) if p not in candidate)
        in_host = sum(sizes[p] for p in candidate)
        if peak - slots_bytes + slots + held + margin <= budget and in_host <= best_bytes:
            best, best_bytes = candidate, in_host
    return best


class BudgetPlan:
    """Settles the ring after the first step (BlockSwap's on_settle) to fit `budget_gib`; `activation_scale`
    (>= 1): how much larger the largest micro-batch's activations are than the first step's."""

    def __init__(self, budget_gib, device, activation_scale=1.0):
        self.budget = budget_gib * GIB
        self.device, self.activation_scale = device, activation_scale
        self.kept = 0  # bytes the device kept reserved after the first step (measure)
        self.settled: dict | None = None  # what was measured and decided (the run's summary)

    def measure(self):
        """At the first step's end, before its CUDA graphs go: what stays reserved once the allocator's
        free cache is given back (the weights, the adapters, the optimizer's state, and the graphs'
        memory pool with its fragmentation, which a replay draws on instead of allocating)."""
        torch.cuda.empty_cache()
        self.kept = torch.cuda.memory_reserved(self.device)

    def __call__(self, engine):
        # the first step's peak: its eager activations, or what its graphs keep, whichever is more
        peak = max(torch.cuda.max_memory_allocated(self.device), self.kept)
        standing = torch.cuda.memory_allocated(self.device)  # weights, adapters, optimizer state
        peak += (peak - standing) * (self.activation_scale - 1)
        margin = margin_bytes(self.budget)
        if peak + margin > self.budget:
            raise EriDiffusionError(
                f"the first step took {peak / GIB:.2f} GiB with every block of the model in CPU memory, more than "
                f"vram_budget_gib {self.budget / GIB:g} leaves with its margin of {margin / GIB:.2f}: set "
                f"vram_budget_gib to at least {(peak + margin) / GIB + 0.5:.1f}, or train at a lower "
                "resolution, batch or frame count."
            )
        ring = ring_for(engine.block_bytes(), peak, engine.resident_bytes(), self.budget, engine.computed_over())
        engine.set_ring(ring)
        self.settled = {
            "budget_gib": self.budget / GIB,
            "first_step_peak_gib": round(peak / GIB, 3),
        }
        logging.info(
            f"EriDiffusion: vram_budget_gib {self.budget / GIB:g}: the first step peaked at {peak / GIB:.2f} GiB "
            f"with every block in CPU memory; from the second step on, {engine.describe()}."
        )
