"""fp8 compute of the frozen base (adapters/fp8_products.py): the scaling keeps every value in
range, an adapted layer's product and its gradients stay within fp8's precision of the plain
formula, fp8 weights as UNETLoader loads them are used in place, layers fp8 cannot take compute as
before, and a run with fp8_compute trains as a bf16 run does and leaves a LoRA stock ComfyUI loads.
CPU torch runs `torch._scaled_mm` too (slowly), so most of this runs without a GPU; the last test
needs an fp8 GPU (Ada/Hopper; run on the GPU machine: see bench/gpu_host.sh), the speed is
bench/train_speed.py's `_fp8compute`."""

import logging
import os

import comfy.ops
import pytest
import torch

from devkit.devices import fp8_gpu
from devkit.stock_comfyui import load_with_stock_comfyui
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.adapters.attach import eject_adapter, inject_adapter
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora
from eridiffusion.training.speed import fp8_products
from eridiffusion.training.speed.fp8_products import (
    E4M3,
    E5M2,
    Fp8Products,
    check_fp8_compute,
    power_of_two_scale,
    quantized,
    quantized_eagerly,
)


@pytest.fixture(autouse=True)
def small_products_in_fp8(monkeypatch):
    """The tiny layers here are far below the size where fp8 pays on a GPU (MIN_MACS, MIN_WIDTH): computed in
    fp8 all the same, except where a test sets a threshold back."""
    monkeypatch.setattr(fp8_products, "MIN_MACS", 0)
    monkeypatch.setattr(fp8_products, "MIN_WIDTH", 0)


@pytest.mark.parametrize("fp8_dtype", [E4M3, E5M2])
@pytest.mark.parametrize("magnitude", [1e-6, 1.0, 3e4])
def test_the_scale_is_a_power_of_two_that_keeps_every_value_in_range(fp8_dtype, magnitude):
    t = torch.randn(64, 48, dtype=torch.bfloat16) * magnitude
    q, scale = quantized(t, fp8_dtype)
    assert scale.dtype == torch.float32 and scale.dim() == 0
    assert torch.log2(scale) == torch.round(torch.log2(scale))
    largest = torch.finfo(fp8_dtype).max
    assert t.abs().max().float() / scale <= largest < 2 * t.abs().max().float() / scale
    assert torch.isfinite(q.float()).all()
    relative = ((q.float() * scale - t.float()).abs().max() / t.abs().max().float()).item()
    assert relative < (0.07 if fp8_dtype == E4M3 else 0.13), relative  # 3 and 2 mantissa bits


def test_an_all_zero_tensor_quantizes_to_zeros_not_nan():
    q, scale = quantized(torch.zeros(32, 16, dtype=torch.bfloat16), E4M3)
    assert scale > 0 and torch.equal(q.float(), torch.zeros(32, 16))
    assert power_of_two_scale(torch.zeros(4), E5M2) > 0


def adapted(cls=torch.nn.Linear, weight_dtype=torch.bfloat16, in_features=64, out_features=48):
    torch.manual_seed(0)
    layer = cls(in_features, out_features)
    torch.nn.init.normal_(layer.weight, std=0.2)
    torch.nn.init.normal_(layer.bias)
    layer = layer.to(torch.bfloat16).requires_grad_(False)
    layer.weight.data = layer.weight.data.to(weight_dtype)
    adapter = AdapterSpec(rank=4, alpha=2.0).build(layer, seed=0)
    torch.nn.init.normal_(adapter.lycoris.lora_up.weight, std=0.2)  # a trained, nonzero up
    return layer, adapter


def run_layer(layer, adapter, x, grad, products=None):
    """(output, ∂x, ∂down, ∂up, names of the autograd nodes) of the adapted layer, computed in fp8
    when `products` is given."""
    adapter.frozen_products = products
    for p in adapter.parameters():
        p.grad = None
    x = x.detach().clone().requires_grad_(True)
    inject_adapter(layer, adapter)
    try:
        y = layer(x)
        y.backward(grad)
    finally:
        eject_adapter(layer, adapter)
        adapter.frozen_products = None
    nodes, stack = set(), [y.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and type(node).__name__ not in nodes:
            nodes.add(type(node).__name__)
            stack += [n for n, _ in node.next_functions]
    down, up = adapter.lycoris.lora_down.weight, adapter.lycoris.lora_up.weight
    return [y, x.grad, down.grad, up.grad], nodes


def relative_errors(got, reference):
    return [((g.float() - r.float()).abs().max() / r.float().abs().max()).item() for g, r in zip(got, reference)]


@pytest.mark.parametrize("cls", [torch.nn.Linear, comfy.ops.disable_weight_init.Linear])
def test_the_adapted_layer_in_fp8_matches_its_bf16_product_and_gradients_within_fp8_precision(cls):
    layer, adapter = adapted(cls)
    x, grad = torch.randn(2, 40, 64, dtype=torch.bfloat16), torch.randn(2, 40, 48, dtype=torch.bfloat16)
    reference, plain_nodes = run_layer(layer, adapter, x, grad)
    products = Fp8Products()
    got, nodes = run_layer(layer, adapter, x, grad, products)
    assert "Fp8LinearBackward" in nodes and "Fp8LinearBackward" not in plain_nodes
    assert [t.dtype for t in got] == [torch.bfloat16, torch.bfloat16, torch.float32, torch.float32]
    errors = relative_errors(got, reference)
    # measured on this CPU: about 0.02 (output, adapter gradients) and 0.05 (input gradient, e5m2)
    assert max(errors) < 0.1, errors
    assert products.layers_in_fp8() == (1, 1)


def test_weights_loaded_in_fp8_are_used_in_place_and_others_get_one_fp8_copy():
    layer, adapter = adapted(comfy.ops.manual_cast.Linear, weight_dtype=E4M3)
    products = Fp8Products()
    x, grad = torch.randn(1, 32, 64, dtype=torch.bfloat16), torch.randn(1, 32, 48, dtype=torch.bfloat16)
    reference, _ = run_layer(layer, adapter, x, grad)  # ComfyUI's cast of the fp8 weight to bf16
    got, nodes = run_layer(layer, adapter, x, grad, products)
    assert "Fp8LinearBackward" in nodes
    forward = next(iter(products._forwards.values()))
    weight8, columns, scale, _ = forward.cached[1]
    assert weight8.data_ptr() == layer.weight.data_ptr() and scale == 1.0  # no copy, no rescaling
    assert torch.equal(columns.float(), weight8.float()) and columns.stride() == (1, 48)  # (48, 64), column-major
    assert max(relative_errors(got, reference)) < 0.1

    bf16_layer, bf16_adapter = adapted()
    run_layer(bf16_layer, bf16_adapter, x, grad, products)
    run_layer(bf16_layer, bf16_adapter, x, grad, products)
    copies = [f.cached[1][0] for f in products._forwards.values() if f.frozen_layer is bf16_layer]
    assert len(copies) == 1 and copies[0].dtype == E4M3 and copies[0].data_ptr() != bf16_layer.weight.data_ptr()
    cached = copies[0].data_ptr()
    run_layer(bf16_layer, bf16_adapter, x, grad, products)
    assert (
        next(f for f in products._forwards.values() if f.frozen_layer is bf16_layer).cached[1][0].data_ptr() == cached
    )


def weight_patched(layer):
    layer.weight_function, layer.comfy_cast_weights = [lambda w: w * 2], True
    return layer


def too_small(layer):
    fp8_products.MIN_MACS = 32 * 64 * 48 + 1  # one more than the product below (the fixture restores it)
    return layer


def too_narrow(layer):
    fp8_products.MIN_WIDTH = 49  # one more than the layer's 48 outputs (the fixture restores it)
    return layer


CANNOT = {
    "weight patches": (lambda: adapted(comfy.ops.manual_cast.Linear), weight_patched, 32),
    "width not a multiple of 16": (lambda: adapted(in_features=40), None, 32),
    "fewer than 16 rows": (adapted, None, 8),
    "a product too small to gain": (adapted, too_small, 32),
    "a weight too narrow to gain": (adapted, too_narrow, 32),
}


@pytest.mark.parametrize("case", sorted(CANNOT))
def test_a_layer_fp8_cannot_take_computes_as_before(case):
    make, change, rows = CANNOT[case]
    layer, adapter = make()
    if change is not None:
        layer = change(layer)
    features = layer.weight.shape[1]
    x, grad = torch.randn(1, rows, features, dtype=torch.bfloat16), torch.randn(1, rows, 48, dtype=torch.bfloat16)
    reference, _ = run_layer(layer, adapter, x, grad)
    products = Fp8Products()
    got, nodes = run_layer(layer, adapter, x, grad, products)
    assert "Fp8LinearBackward" not in nodes
    assert all(torch.equal(a, b) for a, b in zip(got, reference))
    assert products.layers_in_fp8() == (0, 1)


def test_the_device_check_passes_where_fp8_products_run():
    check_fp8_compute(torch.device("cpu"))  # CPU torch has them; a GPU before Ada does not (GPU test)


def bf16_run(run_name, **values):
    return TrainConfig(
        steps=12,
        learning_rate=3e-3,
        dtype="bf16",
        gradient_checkpointing=False,
        log_every=1,
        adapter=AdapterSpec(rank=8, alpha=8.0, targets="all-linear"),
        run_name=run_name,
        **values,
    )


def test_a_run_with_fp8_compute_trains_as_the_bf16_run_and_saves_a_lora_stock_comfyui_loads(
    quality_stack, tmp_path, caplog
):
    model, _, _, data = quality_stack
    with torch.inference_mode(False):
        plain = train_lora(model, data, bf16_run("bf16"), str(tmp_path / "bf16"))
        with caplog.at_level(logging.INFO):
            fp8 = train_lora(model, data, bf16_run("fp8", fp8_compute=True), str(tmp_path / "fp8"))
    counts = [r.getMessage() for r in caplog.records if "fp8_compute:" in r.getMessage()]
    assert len(counts) == 1 and " 0 of" not in counts[0], counts
    assert fp8.losses != plain.losses  # the products really ran in fp8
    differences = [abs(a - b) / b for a, b in zip(fp8.losses, plain.losses)]
    # measured on this CPU: at most 1.3% apart, the held-out loss 1.265 -> 1.1806 (bf16: 1.1788)
    assert max(differences) < 0.05, differences
    assert fp8.eval_loss_after < fp8.eval_loss_before
    assert abs(fp8.eval_loss_after - plain.eval_loss_after) < 0.02 * plain.eval_loss_after
    assert all(adapter.frozen_products is None for _, adapter in fp8.trained.adapters.items())
    path = fp8.lora.save(os.path.join(tmp_path, "fp8.safetensors"), dtype="fp32")
    _, unmatched = load_with_stock_comfyui(model, path, 1.0, caplog)
    assert unmatched == []


@pytest.mark.skipif(not fp8_gpu(), reason="fp8 tensor cores need an Ada or Hopper GPU")
def test_on_an_fp8_gpu_with_cuda_graphs_the_loss_curve_is_the_bf16_one_within_noise(quality_stack, tmp_path, caplog):
    model, _, _, data = quality_stack
    runs = {}
    with torch.inference_mode(False), caplog.at_level(logging.INFO):
        for name, fp8_compute in (("bf16", False), ("fp8", True)):
            config = bf16_run(f"gpu_{name}", fp8_compute=fp8_compute, cuda_graphs="on")
            runs[name] = train_lora(model, data, config, str(tmp_path / name))
    counts = [r.getMessage() for r in caplog.records if "fp8_compute:" in r.getMessage()]
    assert len(counts) == 1 and " 0 of" not in counts[0], counts
    fp8, plain = runs["fp8"], runs["bf16"]
    differences = [abs(a - b) / b for a, b in zip(fp8.losses, plain.losses)]
    print(
        f"fp8 against bf16, CUDA graphs: loss differences {differences}; held-out loss "
        f"{plain.eval_loss_before:.4f} -> {plain.eval_loss_after:.4f} (bf16), {fp8.eval_loss_after:.4f} (fp8)"
    )
    assert fp8.losses != plain.losses and max(differences) < 0.05, differences
    assert abs(fp8.eval_loss_after - plain.eval_loss_after) < 0.02 * plain.eval_loss_after


@pytest.mark.skipif(not fp8_gpu(), reason="fp8 tensor cores need an Ada or Hopper GPU")
def test_on_an_fp8_gpu_a_scaling_that_cannot_compile_falls_back_to_the_eager_kernels(monkeypatch, caplog):
    def cannot_compile(flat, fp8_dtype):
        raise RuntimeError("no C compiler\nsecond line")

    fused = fp8_products._FusedScaling()
    fused.scaled_cast = cannot_compile
    monkeypatch.setattr(fp8_products, "_FUSED", fused)
    t = torch.randn(64, 48, device="cuda", dtype=torch.bfloat16)
    with caplog.at_level(logging.WARNING):
        q, scale = quantized(t, E4M3)
        again = quantized(t, E4M3)  # the failure is remembered: no second attempt, no second warning
    eager_q, eager_scale = quantized_eagerly(t, E4M3)
    assert torch.equal(q.view(torch.uint8), eager_q.view(torch.uint8)) and torch.equal(scale, eager_scale)
    assert torch.equal(again[0].view(torch.uint8), eager_q.view(torch.uint8))
    warnings = [r.getMessage() for r in caplog.records if "scaling kernels are not available" in r.getMessage()]
    assert len(warnings) == 1 and "(no C compiler)" in warnings[0], warnings
    assert fused.failure == "no C compiler"
