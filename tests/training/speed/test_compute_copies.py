"""The LoRA weights cast to the compute dtype once per step (adapters/compute_copies.py): the adapted
layer then adds the kernels of an fp32 one, and training comes out exactly as with per-layer casts."""

import contextlib
import dataclasses

import pytest
import torch

from devkit.kernel_counts import ADDED_KERNELS, adapted_layer, cost_of_a_step
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.adapters.attach import AdapterSet, eject_adapter, inject_adapter
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora
from eridiffusion.training.speed.compute_copies import ComputeCopies
from eridiffusion.training.speed.paths import SpeedPaths

NO_COPIES = SpeedPaths(compute_copies=False)  # each layer casts its fp32 LoRA weights itself


def two_adapted_layers():
    """(layers, their AdapterSet): two bf16 linear layers in a row with fp32 LoRAs."""
    spec = AdapterSpec(rank=4, alpha=2.0)
    first, a = adapted_layer(torch.nn.Linear, torch.bfloat16)
    second = torch.nn.Linear(53, 11).to(torch.bfloat16).requires_grad_(False)
    b = spec.build(second, seed=1)
    torch.nn.init.normal_(b.lycoris.lora_up.weight, std=0.2)
    return [first, second], AdapterSet(spec, {"first": a, "second": b})


def master_gradients(layers, adapter_set, copies, inputs):
    """The adapters' gradients after a backward pass of each input (accumulated), with or without copies."""
    adapter_set.zero_grad(set_to_none=True)
    for layer, (_, adapter) in zip(layers, adapter_set.items()):
        inject_adapter(layer, adapter)
    try:
        with copies.in_use() if copies is not None else contextlib.nullcontext():
            for x in inputs:
                layers[1](layers[0](x)).float().square().sum().backward()
                if copies is not None:
                    copies.fold_gradients()
    finally:
        for layer, (_, adapter) in zip(layers, adapter_set.items()):
            eject_adapter(layer, adapter)
    return [p.grad.clone() for p in adapter_set.parameters()]


def test_a_bf16_lora_with_compute_copies_adds_the_kernels_of_an_fp32_one():
    """The casts of the two fp32 weights forward and of their gradients backward leave the layer:
    10 added kernels become 6 (the two multi-tensor copies per step are not per layer)."""
    layer, adapter = adapted_layer(torch.nn.Linear, torch.bfloat16)
    plain_kernels, _ = cost_of_a_step(layer, torch.bfloat16)
    copies = ComputeCopies(AdapterSet(AdapterSpec(rank=4, alpha=2.0), {"layer": adapter}), torch.bfloat16)
    inject_adapter(layer, adapter)
    try:
        with copies.in_use():
            kernels, _ = cost_of_a_step(layer, torch.bfloat16, adapter)
            into_copies = all(copy.grad is not None for copy in copies.copies)
            copies.fold_gradients()
    finally:
        eject_adapter(layer, adapter)
    assert ADDED_KERNELS[torch.bfloat16] == 10
    assert kernels - plain_kernels == ADDED_KERNELS[torch.float32] == 6
    assert into_copies  # the backward went into the copies, and from them into the masters:
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in adapter.parameters())


def test_gradients_through_compute_copies_equal_the_per_layer_casts_bit_for_bit():
    layers, adapter_set = two_adapted_layers()
    inputs = [torch.randn(3, 7, 37, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(i)) for i in (1, 2)]
    cast_per_layer = master_gradients(layers, adapter_set, None, inputs)
    copies = ComputeCopies(adapter_set, torch.bfloat16)
    through_copies = master_gradients(layers, adapter_set, copies, inputs)
    assert [g.dtype for g in through_copies] == [torch.float32] * 4
    for a, b in zip(through_copies, cast_per_layer):
        assert torch.equal(a, b)
    # the step's end lets the layers compute with the masters again
    assert all(adapter.compute_weights is None for _, adapter in adapter_set.items())


def test_copies_follow_the_weights_an_optimizer_step_changed():
    layers, adapter_set = two_adapted_layers()
    copies = ComputeCopies(adapter_set, torch.bfloat16)
    with torch.no_grad():
        for p in adapter_set.parameters():
            p.add_(1.0)
    with copies.in_use():
        for master, copy in zip(copies.masters, copies.copies):
            assert torch.equal(copy, master.to(torch.bfloat16))


def test_compute_copies_are_made_only_where_they_save_casts():
    layers, adapter_set = two_adapted_layers()
    assert ComputeCopies.worth_it(adapter_set, torch.bfloat16)
    assert not ComputeCopies.worth_it(adapter_set, torch.float32)
    conv = AdapterSpec(rank=4, alpha=2.0, conv_rank=4).build(torch.nn.Conv2d(8, 8, 3), seed=0)
    assert not ComputeCopies.worth_it(AdapterSet(AdapterSpec(), {"conv": conv}), torch.bfloat16)


@pytest.mark.one_host("the trainer's compute copies (their units above run on both hosts' layers)")
def test_an_eager_bf16_run_trains_the_same_adapter_with_and_without_compute_copies(lora_stack, tmp_path, monkeypatch):
    """Through the trainer (gradient accumulation over two micro-batches): the copies are used, and
    the trained adapter is bit for bit the one that per-layer casts train (layers sharing an input
    are left ungrouped here: grouped, they sum in another order; tests/training/speed/test_shared_input.py)."""
    config = TrainConfig(
        steps=2,
        grad_accum=2,
        learning_rate=1e-3,
        dtype="bf16",
        gradient_checkpointing=False,
        cuda_graphs="off",
        run_name="copies",
        eval_images=1,  # (the adapters are compared, not the evaluation)
        eval_timesteps=1,
    )
    init = ComputeCopies.__init__
    monkeypatch.setattr(ComputeCopies, "__init__", lambda self, *args, **kwargs: init(self, *args, share_inputs=False))
    folds = []
    fold = ComputeCopies.fold_gradients
    monkeypatch.setattr(ComputeCopies, "fold_gradients", lambda self: folds.append(1) or fold(self))
    with torch.inference_mode(False):
        with_copies = train_lora(lora_stack["model"], lora_stack["data"], config, str(tmp_path / "a"))
    assert len(folds) == 4  # 2 steps x 2 micro-batches
    with torch.inference_mode(False):
        per_layer = train_lora(
            lora_stack["model"],
            lora_stack["data"],
            dataclasses.replace(config, speed=NO_COPIES),
            str(tmp_path / "b"),
        )
    assert len(folds) == 4
    assert with_copies.losses == per_layer.losses
    a, b = with_copies.trained.adapters.state_dict(), per_layer.trained.adapters.state_dict()
    assert a.keys() == b.keys()
    changed = [name for name in a if not torch.equal(a[name], b[name])]
    assert changed == []
