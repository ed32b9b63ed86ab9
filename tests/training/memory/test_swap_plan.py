"""The VRAM budget's plan (training/memory/swap_plan.py): its arithmetic, and the refusals of a budget or
a swap the model and the device cannot take, before anything loads."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from devkit.short_runs import short_run
from devkit.tiny_models import build_tiny
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.memory.swap_plan import (
    GIB,
    SLOTS,
    check_vram_budget,
    margin_bytes,
    ring_for,
    ring_of,
    smallest_weights_bytes,
    spread,
    weights_in_blocks,
)
from eridiffusion.training.model.blocks import model_blocks


@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_spread_picks_that_many_distinct_positions_evenly(case):
    n, count = case
    positions = spread(count, n)
    assert len(positions) == count and len(set(positions)) == count
    assert all(0 <= p < n for p in positions)
    gaps = [b - a for a, b in zip(positions, positions[1:])]
    assert not gaps or max(gaps) - min(gaps) <= 1


@given(
    st.lists(st.integers(1, 4 * GIB), min_size=1, max_size=48),
    st.integers(0, 8 * GIB),
    st.floats(4, 200),
)
def test_the_ring_holds_as_many_blocks_as_the_budget_leaves_room_for(sizes, activations, budget_gib):
    """The planned memory (the first step's peak, less its slots, plus the new slots and the blocks held)
    stays within the budget less its margin, and no other ring of evenly spread blocks that fits keeps
    fewer bytes in host memory."""
    budget, n = budget_gib * GIB, len(sizes)
    slots_now = SLOTS * max(sizes)
    peak = activations + slots_now

    def planned(ring):
        held = sum(s for p, s in enumerate(sizes) if p not in ring)
        return peak - slots_now + SLOTS * max((sizes[p] for p in ring), default=0) + held

    def in_host(ring):
        return sum(sizes[p] for p in ring)

    ring = ring_for(sizes, peak, slots_now, budget)
    assert ring == spread(len(ring), n)
    if len(ring) < n:
        assert planned(ring) + margin_bytes(budget) <= budget
    for count in range(n):
        other = spread(count, n)
        if planned(other) + margin_bytes(budget) <= budget:
            assert in_host(other) >= in_host(ring)


@given(
    st.lists(st.tuples(st.integers(1, 4 * GIB), st.sampled_from([1024, 4096, 16384])), min_size=1, max_size=48),
    st.integers(0, 8 * GIB),
    st.floats(4, 200),
)
def test_the_ring_takes_the_blocks_computing_over_the_most_positions(blocks, activations, budget_gib):
    """Within the same budget arithmetic, no held block computes over more positions than a ring block
    (its copy would hide behind less compute), and blocks alike are spread evenly."""
    sizes, computed_over = [s for s, _ in blocks], [c for _, c in blocks]
    budget, slots_now = budget_gib * GIB, SLOTS * max(sizes)
    peak = activations + slots_now
    ring = ring_for(sizes, peak, slots_now, budget, computed_over)
    assert ring == ring_of(len(ring), computed_over)
    held = [p for p in range(len(sizes)) if p not in ring]
    if ring and held:
        assert min(computed_over[p] for p in ring) >= max(computed_over[p] for p in held)
    if len(ring) < len(sizes):
        planned = peak - slots_now + SLOTS * max((sizes[p] for p in ring), default=0) + sum(sizes[p] for p in held)
        assert planned + margin_bytes(budget) <= budget
    assert ring_of(len(ring), [7] * len(sizes)) == spread(len(ring), len(sizes))


def test_a_unets_outer_blocks_compute_over_more_positions_than_its_inner_ones(quality_stack):
    """The positions each block's input spans, as the engine records them in a forward: a UNet's shrink
    at each level down (64 px: 8×8 latents, then 4×4 ...). The forward runs as the trainer runs its
    (loaded outside inference mode: the engine's placement binds the parameters to its own tensors, which a
    parameter ComfyUI made under inference mode, on a GPU, cannot take)."""
    import comfy.model_management

    from devkit.stock_comfyui import ProbeInput
    from eridiffusion.training.memory.block_swap import BlockSwap
    from eridiffusion.training.model import loading

    model, _, _, data = quality_stack
    patcher = model.clone()
    engine = BlockSwap(patcher, [], patcher.load_device)
    engine.install(patcher)
    probe = ProbeInput.of(model, data)
    try:
        with torch.inference_mode(False), torch.no_grad():
            comfy.model_management.load_models_gpu([patcher], force_full_load=True)
            device = patcher.load_device
            inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in probe.inputs.items()}
            patcher.model.apply_model(probe.x.to(device), probe.sigma.to(device), **inputs)
    finally:
        loading.unload(patcher)
    seen = engine.computed_over()
    latent = probe.x.shape[-2] * probe.x.shape[-1] * probe.x.shape[0]
    assert seen is not None and max(seen) == latent and min(seen) < latent
    assert len(set(seen)) > 1


def test_the_smallest_plan_is_the_weights_outside_the_blocks_and_two_blocks_room():
    model, _, _ = build_tiny("flux_dev", seed=0)
    diffusion_model = model.model.diffusion_model
    blocks, other = weights_in_blocks(diffusion_model)
    assert len(blocks) == len(model_blocks(diffusion_model)) and other > 0
    total = sum(t.numel() * t.element_size() for t in diffusion_model.state_dict().values())
    assert sum(blocks) + other == total
    assert smallest_weights_bytes(diffusion_model) == other + SLOTS * max(blocks)


def test_a_budget_below_the_weights_alone_is_refused_naming_one_that_passes():
    model, _, _ = build_tiny("flux_dev", seed=0)
    diffusion_model, cuda = model.model.diffusion_model, torch.device("cuda")

    def budget(gib):
        return short_run("off", "r", gradient_checkpointing=True, vram_budget_gib=gib)

    with pytest.raises(EriDiffusionError, match=r"set vram_budget_gib to at least ([0-9.]+)") as refused:
        check_vram_budget(budget(0.5), diffusion_model, cuda)
    named = float(str(refused.value).split("at least ")[1].split(",")[0])
    check_vram_budget(budget(named), diffusion_model, cuda)


def test_a_budget_is_refused_on_the_cpu_and_a_swap_of_more_blocks_than_the_model_has():
    model, _, _ = build_tiny("sd15", seed=0)
    diffusion_model, n = model.model.diffusion_model, len(model_blocks(model.model.diffusion_model))
    budget = short_run("off", "r", gradient_checkpointing=True, vram_budget_gib=8)
    with pytest.raises(EriDiffusionError, match="this run trains on cpu: set vram_budget_gib to 0"):
        check_vram_budget(budget, diffusion_model, torch.device("cpu"))
    too_many = short_run("off", "r", gradient_checkpointing=True, blocks_to_swap=n + 1)
    with pytest.raises(EriDiffusionError, match=f"more than the {n} blocks this model has: set at most {n}"):
        check_vram_budget(too_many, diffusion_model, torch.device("cpu"))
    check_vram_budget(short_run("off", "r", gradient_checkpointing=True, blocks_to_swap=n), diffusion_model, "cpu")


@pytest.mark.parametrize(
    "values, says",
    [
        (dict(blocks_to_swap=2, gradient_checkpointing=False), "turn gradient_checkpointing on"),
        (dict(vram_budget_gib=20.0, blocks_to_swap=2), "set one of them, the other to 0"),
        (dict(vram_budget_gib=20.0, weights_vram_gib=4.0), "set weights_vram_gib to 0"),
        (dict(blocks_to_swap=2, torch_compile=True), "turn torch_compile off"),
        (dict(vram_budget_gib=20.0, fp8_compute=True), "turn fp8_compute off"),
    ],
)
def test_settings_block_swap_cannot_run_with_are_refused_naming_the_fix(values, says):
    with pytest.raises(EriDiffusionError, match=says):
        short_run("off", "r", **{"gradient_checkpointing": True, **values})
