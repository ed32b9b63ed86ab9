"""Block swap (training/memory/block_swap.py): the blocks' weights placed from host memory through a
ring of device slots train exactly what the resident model trains, on tiny stacks of ComfyUI's own
classes (a UNet with skip connections, a DiT of two block lists), on the CPU as on a GPU; the input
MODEL is never changed; a graph that still holds weights the ring overwrote raises."""

import dataclasses
import os

import pytest
import torch

from devkit.short_runs import short_run
from devkit.tiny_models import build_tiny
from eridiffusion.training.memory.block_swap import BlockSwap
from eridiffusion.training.model.blocks import model_blocks
from eridiffusion.training.run.trainer import train_lora


@pytest.fixture(scope="module")
def stacks(datasets_dir, tmp_path_factory):
    """{arch: (model, data)}: tiny SD1.5 and Flux with 2 dog photos at 64 px."""
    from eridiffusion.training.data.dataset import load_dataset
    from eridiffusion.training.data.training_data import build_training_data

    dataset = load_dataset(os.path.join(datasets_dir, "dreambooth_dog"))
    built = {}
    for arch in ("sd15", "flux_dev"):
        model, clip, vae = build_tiny(arch, seed=0)
        with torch.inference_mode():
            data = build_training_data(dataset, vae, clip, 64, str(tmp_path_factory.mktemp(f"swap_{arch}")))
        built[arch] = (model, dataclasses.replace(data, samples=data.samples[:2], validation=None))
    return built


def _run(model, data, folder, **values):
    """3 fp32 steps with checkpointing, on ComfyUI's device (the CPU here, the GPU on the GPU machine)."""
    values = {"gradient_checkpointing": True, "steps": 3, "cuda_graphs": "off", **values}
    config = short_run(values.pop("cuda_graphs"), "swap", **values)
    with torch.inference_mode(False):
        return train_lora(model, data, config, str(folder))


def _weights(model):
    return {n: (t.data_ptr(), t.device, t.clone()) for n, t in model.model.diffusion_model.state_dict().items()}


@pytest.mark.parametrize("arch", ["sd15", "flux_dev"])
def test_blocks_swapped_through_the_ring_train_bit_for_bit_what_resident_blocks_train(stacks, arch, tmp_path):
    """Bit for bit on the CPU; on a GPU within its kernels' rounding (the products' operands sit elsewhere)."""
    model, data = stacks[arch]
    before = _weights(model)
    blocks = len(model_blocks(model.model.diffusion_model))
    resident = _run(model, data, tmp_path / "resident")
    swapped = _run(model, data, tmp_path / "swapped", blocks_to_swap=blocks - 1)
    assert swapped.block_swap["blocks_in_ring"] == blocks - 1 and resident.block_swap is None
    if model.load_device.type == "cpu":
        assert swapped.losses == resident.losses
        # (the evaluation under block swap runs a training batch of its timesteps at a time, run/evaluation.py:
        # the same products in other batches, equal to the CPU's batched kernels' rounding)
        assert swapped.eval_loss_after == pytest.approx(resident.eval_loss_after, rel=1e-6)
        for name, tensor in resident.lora.tensors.items():
            assert torch.equal(swapped.lora.tensors[name], tensor), name
    else:  # a GPU's kernels differ by the address and alignment of their operands (cuBLAS, cuDNN), and
        # Adam's first steps scale the gradients' rounding up: the losses alone are compared there
        assert swapped.losses == pytest.approx(resident.losses, rel=1e-3)
    # each training forward copied the ring's blocks in at least once and at most twice (forward, backward)
    ring_gib = swapped.block_swap["host_to_device_gib_per_forward"]
    assert ring_gib > 0
    after = _weights(model)
    for name, (pointer, where, value) in before.items():
        assert torch.equal(after[name][2].to(value.device), value), name
        if model.load_device.type == "cpu":  # (with a GPU, ComfyUI moves the input's weights as it loads it)
            assert after[name][0] == pointer and after[name][1] == where, name


@pytest.mark.parametrize("arch", ["sd15", "flux_dev"])
def test_regions_that_start_with_an_empty_ring_train_bit_for_bit_what_resident_blocks_train(
    stacks, arch, tmp_path, monkeypatch
):
    """The placement a CUDA graph can replay (each forward, backward and no-grad forward copying all the
    blocks it needs, none ahead of its own region) trains what the resident blocks train; it copies more
    than the placement that prefetches across regions, never less than the ring once per forward."""
    model, data = stacks[arch]
    blocks = len(model_blocks(model.model.diffusion_model))
    across = _run(model, data, tmp_path / "across", blocks_to_swap=blocks - 1)
    monkeypatch.setattr(BlockSwap, "graphed", True)
    regions = _run(model, data, tmp_path / "regions", blocks_to_swap=blocks - 1)
    if model.load_device.type == "cpu":
        assert regions.losses == across.losses
        for name, tensor in across.lora.tensors.items():
            assert torch.equal(regions.lora.tensors[name], tensor), name
    else:
        assert regions.losses == pytest.approx(across.losses, rel=1e-3)
    assert regions.block_swap["host_to_device_gib_per_forward"] > across.block_swap["host_to_device_gib_per_forward"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("arch", ["sd15", "flux_dev"])
def test_steps_replayed_from_cuda_graphs_copy_the_swapped_blocks_in_themselves(stacks, arch, tmp_path):
    """cuda_graphs on (a capture that fails stops the run) with every block but one in the ring of two
    slots: the replays compute what the graphed resident run computes, which they only can if each graph
    makes the copies its blocks need into the slots it captured."""
    model, data = stacks[arch]
    blocks = len(model_blocks(model.model.diffusion_model))
    resident = _run(model, data, tmp_path / "resident", cuda_graphs="on", steps=4)
    swapped = _run(model, data, tmp_path / "swapped", cuda_graphs="on", steps=4, blocks_to_swap=blocks - 1)
    assert swapped.losses == pytest.approx(resident.losses, rel=1e-3)
    assert swapped.eval_loss_after == pytest.approx(resident.eval_loss_after, rel=1e-3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a VRAM budget plans GPU memory")
def test_a_budget_settled_after_the_first_step_recaptures_its_graphs_and_trains_what_resident_trains(stacks, tmp_path):
    """The first step runs (and captures its graphs) with every block in the ring; the plan then holds what
    the budget leaves room for, the graphs go, and the next steps capture and replay the new placement."""
    model, data = stacks["flux_dev"]
    resident = _run(model, data, tmp_path / "resident", cuda_graphs="on", steps=4)
    budgeted = _run(model, data, tmp_path / "budget", cuda_graphs="on", steps=4, vram_budget_gib=40.0)
    assert budgeted.block_swap["budget_gib"] == 40.0 and budgeted.block_swap["blocks_in_ring"] == 0
    assert budgeted.losses == pytest.approx(resident.losses, rel=1e-3)


@pytest.mark.parametrize("arch", ["sd15", "flux_dev"])
def test_the_trained_model_samples_with_its_blocks_back_in_place(stacks, arch, tmp_path):
    """The result MODEL (a clone of the input with the adapters) computes as the resident run's: the ring
    is gone with the training clone."""
    from devkit.stock_comfyui import ProbeInput

    model, data = stacks[arch]
    blocks = len(model_blocks(model.model.diffusion_model))
    resident = _run(model, data, tmp_path / "resident")
    swapped = _run(model, data, tmp_path / "swapped", blocks_to_swap=blocks)
    probe = ProbeInput.of(model, data)
    swapped_output, resident_output = probe.output(swapped.patcher), probe.output(resident.patcher)
    if model.load_device.type == "cpu":
        assert torch.equal(swapped_output, resident_output)
    else:  # (trained within the GPU's rounding of each other)
        assert (swapped_output - resident_output).norm() <= 1e-2 * resident_output.norm()
    assert not torch.equal(resident_output, probe.output(model))


def test_a_graph_holding_weights_the_ring_overwrote_raises_instead_of_computing_with_others(stacks):
    """Without checkpointing a forward keeps every block's weights for its backward; the ring has
    overwritten all but the last two by then, and autograd refuses the changed ones."""
    from comfy.model_management import load_models_gpu

    from devkit.stock_comfyui import ProbeInput
    from eridiffusion.training.model.autograd_weights import frozen_weights_injection

    model, data = stacks["sd15"]
    patcher = model.clone()
    blocks = model_blocks(patcher.model.diffusion_model)
    frozen_weights_injection(patcher)  # (as a run registers them: the autograd-safe weights, then block swap)
    engine = BlockSwap(patcher, range(len(blocks)), patcher.load_device)
    engine.install(patcher)
    load_models_gpu([patcher], force_full_load=True)
    probe = ProbeInput.of(model, data)
    device = patcher.load_device
    inputs = {n: v.to(device) if isinstance(v, torch.Tensor) else v for n, v in probe.inputs.items()}
    with torch.inference_mode(False), torch.enable_grad():
        x = probe.x.to(device).requires_grad_(True)
        out = patcher.model.apply_model(x, probe.sigma.to(device), **inputs)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.float().square().mean().backward()
    from eridiffusion.training.model import loading

    loading.unload(patcher)


def test_a_ring_block_computes_from_a_slot_and_rests_on_its_host_copy(stacks):
    """While a ring block computes, its weights are views of a device slot, and between its turns views of
    its host copy (or of the slot it was copied into ahead of its turn); a held block computes from its
    device copy."""
    from comfy.model_management import load_models_gpu

    from devkit.stock_comfyui import ProbeInput
    from eridiffusion.training.model import loading

    model, data = stacks["flux_dev"]
    patcher = model.clone()
    engine = BlockSwap(patcher, [0, 2], patcher.load_device)
    engine.install(patcher)
    seen = {}

    def inside(buffer, tensor):
        return buffer.data_ptr() <= tensor.data_ptr() < buffer.data_ptr() + buffer.numel()

    def where(block):
        weight = block.parameters()[0]
        if block.device_copy is not None and inside(block.device_copy, weight):
            return "device copy"
        if block.host is not None and inside(block.host, weight):
            return "host"
        return next((f"slot {s}" for s, slot in enumerate(engine.slots) if inside(slot, weight)), "elsewhere")

    def record(block):  # on the layer owning the block's first weight: it runs inside the block's forward
        def hook(module, args):
            seen.setdefault(block.position, where(block))

        return hook

    handles = [b.layout[0][0].register_forward_pre_hook(record(b)) for b in engine.blocks[:3]]
    try:
        load_models_gpu([patcher], force_full_load=True)
        probe = ProbeInput.of(model, data)
        device = patcher.load_device
        inputs = {n: v.to(device) if isinstance(v, torch.Tensor) else v for n, v in probe.inputs.items()}
        with torch.inference_mode():
            patcher.model.apply_model(probe.x.to(device), probe.sigma.to(device), **inputs)
        assert seen[0].startswith("slot") and seen[2].startswith("slot") and seen[0] != seen[2]
        assert seen[1] == "device copy"
        for block in (engine.blocks[0], engine.blocks[2]):
            assert where(block) == ("host" if block.slot is None else f"slot {block.slot}")
    finally:
        for handle in handles:
            handle.remove()
        loading.unload(patcher)
    assert engine.bytes_copied >= engine.blocks[0].nbytes + engine.blocks[2].nbytes


@pytest.mark.parametrize("arch", ["sd15", "flux_dev"])
def test_a_forward_with_blocks_swapped_computes_what_the_resident_model_computes(stacks, arch):
    """The same weights give the same output, every ring block copied in while others compute: on a GPU the
    copies run on their own stream, and one read too early would show here."""
    from devkit.stock_comfyui import ProbeInput
    from eridiffusion.training.model import loading

    model, data = stacks[arch]
    probe = ProbeInput.of(model, data)
    resident = probe.output(model.clone())
    patcher = model.clone()
    n = len(model_blocks(patcher.model.diffusion_model))
    BlockSwap(patcher, [p for p in range(n) if p % 3], patcher.load_device).install(patcher)
    try:
        swapped = [probe.output(patcher) for _ in range(2)]  # (the second starts from the ring the first left)
    finally:
        loading.unload(patcher)
    for output in swapped:
        if model.load_device.type == "cpu":
            assert torch.equal(output, resident)
        else:
            assert (output - resident).abs().max() <= 1e-5 * resident.abs().max()


def test_a_lora_loaded_on_the_input_model_stays_in_the_swapped_models_output(stacks):
    """ComfyUI applies a MODEL's weight patches (a LoRA loaded before training) as it loads; the layers
    they patch stay ComfyUI's to load, so a forward with every block in the ring still computes them."""
    from devkit.stock_comfyui import ProbeInput
    from eridiffusion.training.model import loading

    model, data = stacks["sd15"]
    name, weight = next((n, p) for n, p in model.model.diffusion_model.named_parameters() if "attn1.to_q" in n)
    key = f"diffusion_model.{name}"
    patched = model.clone()
    generator = torch.Generator().manual_seed(0)
    delta = torch.randn(weight.shape, generator=generator) * 0.5
    patched.add_patches({key: (delta,)}, 1.0)  # a "diff" patch, as a LoRA merged into the MODEL
    probe = ProbeInput.of(model, data)
    loaded_by_comfyui = probe.output(patched)
    assert not torch.equal(loaded_by_comfyui, probe.output(model))
    swapped = patched.clone()
    n = len(model_blocks(swapped.model.diffusion_model))
    BlockSwap(swapped, range(n), swapped.load_device).install(swapped)
    try:
        output = probe.output(swapped)
    finally:
        loading.unload(swapped)
    if model.load_device.type == "cpu":
        assert torch.equal(output, loaded_by_comfyui)
    else:
        assert (output - loaded_by_comfyui).abs().max() <= 1e-5 * loaded_by_comfyui.abs().max()
