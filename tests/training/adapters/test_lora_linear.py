"""A LoRA-adapted linear layer as one autograd node (adapters/lora_linear.py): the same values and
gradients as the plain formula, in both of its forms, and its cost in kernels and autograd nodes
per adapted layer, so the eager (no CUDA graphs) step cannot silently get slower again."""

import comfy.ops
import pytest
import torch

from devkit.kernel_counts import ADDED_KERNELS, adapted_layer, cost_of_a_step
from eridiffusion.training.adapters.attach import eject_adapter, inject_adapter
from eridiffusion.training.adapters.lora_linear import plain_weight_of

# (layer class, the autograd node the adapted layer records): a plain layer gets the frozen product
# computed with the adapter's; a layer ComfyUI casts (manual_cast) keeps its own forward
CASES = {
    "torch": (torch.nn.Linear, "_LoRALinearBackward"),
    "comfy": (comfy.ops.disable_weight_init.Linear, "_LoRALinearBackward"),
    "comfy_cast": (comfy.ops.manual_cast.Linear, "_LoRATermBackward"),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_adapted_layer_matches_the_lora_formula_in_value_and_gradients(case, dtype):
    cls, node = CASES[case]
    layer, adapter = adapted_layer(cls, dtype)
    x = torch.randn(2, 5, 37, dtype=dtype, requires_grad=True)
    grad = torch.randn(2, 5, 53, dtype=dtype)
    inject_adapter(layer, adapter)
    try:
        y = layer(x)
        assert type(y.grad_fn).__name__ == node
        y.backward(grad)
    finally:
        eject_adapter(layer, adapter)
    down, up = adapter.lycoris.lora_down.weight, adapter.lycoris.lora_up.weight
    got = [y, x.grad, down.grad, up.grad]
    assert [t.dtype for t in got] == [dtype, dtype, torch.float32, torch.float32]  # fp32 master weights keep theirs

    x_ref = x.detach().float().requires_grad_(True)
    down_ref, up_ref = down.detach().clone().requires_grad_(True), up.detach().clone().requires_grad_(True)
    scale = adapter.lycoris.scale
    y_ref = (
        torch.nn.functional.linear(x_ref, layer.weight.float(), layer.bias.float())
        + scale * (x_ref @ down_ref.t()) @ up_ref.t()
    )
    y_ref.backward(grad.float())
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    for value, reference in zip(got, [y_ref, x_ref.grad, down_ref.grad, up_ref.grad]):
        error = (value.float() - reference).abs().max() / reference.abs().max()
        assert error < tolerance


def test_strength_and_bypass_scale_the_adapter_term():
    layer, adapter = adapted_layer(torch.nn.Linear, torch.float32)
    x = torch.randn(3, 37)
    inject_adapter(layer, adapter)
    try:
        with torch.no_grad():
            full = layer(x)
            adapter.multiplier = 0.5
            half = layer(x)
            adapter.multiplier = 0.0
            plain = layer(x)
    finally:
        eject_adapter(layer, adapter)
    with torch.no_grad():
        assert torch.equal(plain, layer(x))
    torch.testing.assert_close(half - plain, 0.5 * (full - plain), rtol=1e-4, atol=1e-5)


def test_the_frozen_product_is_left_to_the_layer_whenever_comfyui_would_change_it():
    layer, _ = adapted_layer(comfy.ops.disable_weight_init.Linear, torch.float32)
    x = torch.randn(2, 37)
    assert plain_weight_of(layer, x) is not None
    assert plain_weight_of(layer, x.to(torch.bfloat16)) is None  # ComfyUI would cast the weight
    layer.weight_function = [lambda w: w * 2]  # a LoRA that ComfyUI patches on the fly (lowvram)
    assert plain_weight_of(layer, x) is None
    layer.weight_function = []
    layer.comfy_cast_weights = True
    assert plain_weight_of(layer, x) is None
    assert plain_weight_of(torch.nn.Conv1d(3, 3, 1), x) is None


@pytest.mark.parametrize("dtype", sorted(ADDED_KERNELS, key=str))
def test_a_lora_adds_six_kernels_and_one_autograd_node_to_each_adapted_linear_layer(dtype):
    """Without CUDA graphs an SDXL step is paced by the CPU's work per op, thousands of them from
    the 560 adapted layers: the plain ops took 12.5 kernel launches, 77 aten ops and 13 autograd
    nodes per layer on an H100 (bench/eager_step.py)."""
    layer, adapter = adapted_layer(torch.nn.Linear, dtype)
    plain_kernels, _ = cost_of_a_step(layer, dtype)
    inject_adapter(layer, adapter)
    try:
        kernels, nodes = cost_of_a_step(layer, dtype, adapter)
    finally:
        eject_adapter(layer, adapter)
    assert kernels - plain_kernels == ADDED_KERNELS[dtype]
    assert nodes == 2  # the sum's and the adapted layer's (the plain ops recorded 13 per layer)
