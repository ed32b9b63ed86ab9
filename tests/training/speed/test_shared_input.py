"""LoRA layers that take one input, computed as one node with one down-projection
(adapters/shared_input.py), on a tiny block of ComfyUI's own transformer class: which layers are
grouped, that the gradients are those of the layers computed alone, and the kernels it saves."""

import dataclasses

import comfy.ldm.modules.attention
import comfy.ops
import pytest
import torch

from devkit.kernel_counts import KernelCounter
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.adapters.attach import AdapterSet, eject_adapter, inject_adapter
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora
from eridiffusion.training.speed.compute_copies import ComputeCopies

ATTENTION = ("to_q", "to_k", "to_v", "to_out.0")


# the layers' weights as the activations (the group computes the frozen products too), or in fp32
# with ComfyUI casting them to the activations' dtype (the layers' own forwards compute them)
OPERATIONS = {"plain": comfy.ops.disable_weight_init, "cast": comfy.ops.manual_cast}


def adapted_block(dtype, operations="plain"):
    """(SDXL's transformer block, tiny, with its weights drawn; AdapterSet of its attention layers)."""
    torch.manual_seed(0)
    block = comfy.ldm.modules.attention.BasicTransformerBlock(
        16, 2, 8, context_dim=12, operations=OPERATIONS[operations]
    )
    for p in block.parameters():  # disable_weight_init leaves them unset
        torch.nn.init.normal_(p, std=0.3)
    block = block.to(dtype if operations == "plain" else torch.float32).requires_grad_(False)
    spec = AdapterSpec(rank=4, alpha=2.0)
    modules = dict(block.named_modules())
    names = [f"{attn}.{layer}" for attn in ("attn1", "attn2") for layer in ATTENTION]
    adapters = {}
    for i, name in enumerate(names):
        adapters[name] = spec.build(modules[name], seed=i)
        torch.nn.init.normal_(adapters[name].lycoris.lora_up.weight, std=0.2)  # trained, nonzero ups
    return block, AdapterSet(spec, adapters)


def inputs(dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 6, 16, dtype=dtype, generator=generator).requires_grad_(True)
    return x, torch.randn(2, 5, 12, dtype=dtype, generator=generator)


def steps(block, adapter_set, copies, count, dtype=torch.float64):
    """[(masters' gradients, input gradient)] of `count` forward and backward passes through `block`."""
    modules = dict(block.named_modules())
    for name, adapter in adapter_set.items():
        inject_adapter(modules[name], adapter)
    results = []
    try:
        for seed in range(count):
            adapter_set.zero_grad(set_to_none=True)
            x, context = inputs(dtype, seed)
            with copies.in_use():
                block(x, context=context).square().sum().backward()
                copies.fold_gradients()
            results.append(([p.grad.clone() for p in adapter_set.parameters()], x.grad))
    finally:
        for name, adapter in adapter_set.items():
            eject_adapter(modules[name], adapter)
    return results


def autograd_node_names(block, adapter_set, copies, dtype=torch.float64):
    """The type names of the autograd nodes of one forward pass through `block`."""
    modules = dict(block.named_modules())
    for name, adapter in adapter_set.items():
        inject_adapter(modules[name], adapter)
    try:
        with copies.in_use():
            out = block(*inputs(dtype, 0)[:1], context=inputs(dtype, 0)[1])
    finally:
        for name, adapter in adapter_set.items():
            eject_adapter(modules[name], adapter)
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo += [next_node for next_node, _ in node.next_functions]
    return sorted(type(node).__name__ for node in seen if "LoRA" in type(node).__name__)


def group_names(copies, adapter_set):
    names = {id(adapter): name for name, adapter in adapter_set.items()}
    return [[names[id(adapter)] for adapter, _ in group.members] for group in copies.groups]


def test_the_layers_an_attention_block_calls_with_one_input_are_learned_as_groups():
    """Self-attention's q, k and v take the block's activations, cross-attention's k and v the
    text: learned from the calls of the first step, whatever the layers are named."""
    block, adapter_set = adapted_block(torch.float64)
    copies = ComputeCopies(adapter_set, torch.float64)
    assert copies.groups is None
    steps(block, adapter_set, copies, 1)
    assert group_names(copies, adapter_set) == [
        ["attn1.to_q", "attn1.to_k", "attn1.to_v"],
        ["attn2.to_k", "attn2.to_v"],
    ]
    # each group's down copies are row blocks of its one matrix
    for group in copies.groups:
        for adapter, _ in group.members:
            assert adapter.compute_weights is None  # outside a step
        stacked = group.downs
        assert stacked.shape == (4 * len(group.members), 16 if len(group.members) == 3 else 12)


@pytest.mark.parametrize("operations", sorted(OPERATIONS))
def test_grouped_layers_train_the_gradients_of_the_layers_computed_alone(operations):
    block, adapter_set = adapted_block(torch.float64, operations)
    alone = steps(block, adapter_set, ComputeCopies(adapter_set, torch.float64, share_inputs=False), 3)
    copies = ComputeCopies(adapter_set, torch.float64)
    grouped = steps(block, adapter_set, copies, 3)
    assert len(copies.groups) == 2
    # the groups computed the frozen products themselves, or took them from the layers' forwards
    node = "_SharedInputLoRABackward" if operations == "plain" else "_SharedInputLoRATermBackward"
    alone_node = "_LoRALinearBackward" if operations == "plain" else "_LoRATermBackward"
    assert autograd_node_names(block, adapter_set, copies) == [alone_node] * 3 + [node] * 2
    for (grads_a, x_a), (grads_b, x_b) in zip(alone, grouped):
        torch.testing.assert_close(x_b, x_a, rtol=1e-12, atol=1e-12)
        for a, b in zip(grads_a, grads_b):
            assert a.dtype == b.dtype == torch.float32
            torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)
        assert any(a.abs().max() > 0 for a in grads_a)


def kernels_of_a_step(block, adapter_set, copies):
    modules = dict(block.named_modules())
    for name, adapter in adapter_set.items():
        inject_adapter(modules[name], adapter)
    try:
        x, context = inputs(torch.bfloat16, 0)
        counter = KernelCounter()
        with copies.in_use(), counter:
            block(x, context=context).float().square().sum().backward()
            copies.fold_gradients()
    finally:
        for name, adapter in adapter_set.items():
            eject_adapter(modules[name], adapter)
    return counter.count


def test_a_group_of_three_takes_26_kernels_to_18_and_a_group_on_the_text_12_to_10():
    """Three LoRA layers alone: 3 × (3 forward + 5 backward) and 2 additions of their input
    gradients; together 7 forward (one down product for all) and 11 backward. Cross-attention's k
    and v take the text, which needs no gradient: 2 × (3 + 3) alone, 5 + 5 together."""
    block, adapter_set = adapted_block(torch.bfloat16)
    alone = ComputeCopies(adapter_set, torch.bfloat16, share_inputs=False)
    copies = ComputeCopies(adapter_set, torch.bfloat16)
    kernels_of_a_step(block, adapter_set, copies)  # learns the groups
    assert len(copies.groups) == 2
    saved = kernels_of_a_step(block, adapter_set, alone) - kernels_of_a_step(block, adapter_set, copies)
    assert saved == (26 - 18) + (12 - 10)


def test_a_grouped_layer_called_with_another_input_computes_alone_and_the_group_is_dropped():
    """The call pattern the first step showed changes (cross-attention's v is given its own copy of
    the text, through CrossAttention's `value`): the steps still come out as without groups, and
    that group goes."""
    block, adapter_set = adapted_block(torch.float64)
    alone = steps(block, adapter_set, ComputeCopies(adapter_set, torch.float64, share_inputs=False), 2)
    copies = ComputeCopies(adapter_set, torch.float64)
    steps(block, adapter_set, copies, 1)
    attn2 = block.attn2
    attn2.forward = lambda x, context=None, value=None, **kwargs: type(attn2).forward(
        attn2, x, context=context, value=context.clone(), **kwargs
    )
    try:
        changed = steps(block, adapter_set, copies, 2)
    finally:
        del attn2.forward
    assert group_names(copies, adapter_set) == [["attn1.to_q", "attn1.to_k", "attn1.to_v"]]
    for (grads_a, x_a), (grads_b, x_b) in zip(alone, changed):
        torch.testing.assert_close(x_b, x_a, rtol=1e-12, atol=1e-12)
        for a, b in zip(grads_a, grads_b):
            torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)


@pytest.mark.one_host("the trainer's grouping of shared inputs (its units above run on both hosts' attention)")
def test_a_checkpointed_eager_run_groups_from_its_second_step_and_trains_as_ungrouped(
    lora_stack, tmp_path, monkeypatch
):
    """Through the trainer, with gradient checkpointing (the blocks recompute in backward, groups
    and all): the groups learned in step 1 compute steps 2 and 3 without a miss, and the losses are
    those of the ungrouped run up to bf16 rounding (the input gradients are summed in another order)."""
    config = TrainConfig(
        steps=3, learning_rate=1e-3, dtype="bf16", gradient_checkpointing=True, cuda_graphs="off", run_name="grouped"
    )
    config = dataclasses.replace(config, eval_images=1, eval_timesteps=1)  # (the losses are compared)
    seen = []
    fold = ComputeCopies.fold_gradients

    def fold_noted(self):
        seen.append(None if self.groups is None else (len(self.groups), sum(g.missed for g in self.groups)))
        return fold(self)

    monkeypatch.setattr(ComputeCopies, "fold_gradients", fold_noted)
    with torch.inference_mode(False):
        grouped = train_lora(lora_stack["model"], lora_stack["data"], config, str(tmp_path / "a"))
    assert seen[0] is None and seen[1] == seen[2] and seen[1][0] > 0 and seen[1][1] == 0
    init = ComputeCopies.__init__
    monkeypatch.setattr(ComputeCopies, "__init__", lambda self, *args, **kwargs: init(self, *args, share_inputs=False))
    with torch.inference_mode(False):
        ungrouped = train_lora(lora_stack["model"], lora_stack["data"], config, str(tmp_path / "b"))
    assert seen[3:] == [(0, 0)] * 3  # no groups learned or used
    assert grouped.losses[0] == ungrouped.losses[0]  # step 1 learns, ungrouped
    torch.testing.assert_close(torch.tensor(grouped.losses), torch.tensor(ungrouped.losses), rtol=5e-3, atol=0)
