"""Where the frozen base's weights live while a run trains: whole on the device (ComfyUI's loading),
or the model's blocks swapped through a ring of device slots from host memory (block_swap.py) as the
VRAM budget plans (swap_plan.py). The training loop sees none of it: the blocks' forwards place their
own weights."""

import logging

from ..model.blocks import model_blocks
from .block_swap import BlockSwap
from .quantized_base import QuantizedBase, quantized_base_for
from .swap_plan import BudgetPlan, check_vram_budget, initial_ring, swaps_blocks

__all__ = ["BlockSwap", "QuantizedBase", "block_swap_for", "check_vram_budget", "quantized_base_for"]


def block_swap_for(patcher, config, device, trained_parameters, activation_scale=1.0):
    """The BlockSwap of a training clone `patcher` as `config` asks (vram_budget_gib, blocks_to_swap),
    installed on it; None when the config swaps nothing."""
    if not swaps_blocks(config):
        return None
    plan = BudgetPlan(config.vram_budget_gib, device, activation_scale) if config.vram_budget_gib > 0 else None
    ring = initial_ring(config, len(model_blocks(patcher.model.diffusion_model)))
    engine = BlockSwap(patcher, ring, device, {id(p) for p in trained_parameters}, on_settle=plan)
    engine.install(patcher)
    why = (
        f"vram_budget_gib {config.vram_budget_gib:g}: the first step runs with every block in CPU memory and "
        "measures what the rest of the budget holds"
        if plan is not None
        else f"blocks_to_swap {config.blocks_to_swap}"
    )
    logging.info(f"EriDiffusion: block swap ({why}): {engine.describe()}")
    return engine
