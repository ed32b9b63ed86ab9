"""The fused RoPE (training/speed/rope_kernel.py, training/speed/fused_rope.py) computes what the host's own
training path (comfy.ldm.flux.math) computes, forward and input gradient: on the CPU through
Triton's interpreter, on a GPU natively in bf16; inputs it does not fit, and a kernel that cannot
build, take the host's function."""

import logging

import comfy.ldm.flux.math as flux_math
import pytest
import torch

from devkit.triton_interpreter import interpreted
from eridiffusion.training.speed import fused_rope, rope_kernel
from eridiffusion.training.speed.fused_rope import fused_flux_rope

triton = pytest.importorskip("triton")

# the host's plain-torch RoPE (0.2x keeps it behind its training switch; 0.3.75 has only it)
HOST_ROPE = getattr(flux_math, "_apply_rope1", flux_math.apply_rope1)

# the kernel on each case, through Triton's interpreter (devkit.triton_interpreter)
INTERPRETED = """
results = []
for case in json.load(sys.stdin):
    x = torch.tensor(case["x"]).permute(0, 2, 1, 3)  # (batch, heads, positions, dim), not contiguous
    freqs = torch.tensor(case["freqs"])
    grad = torch.tensor(case["grad"])
    results.append([kernels.rotated(x, freqs).tolist(), kernels.rotated(grad, freqs, transpose=True).tolist()])
print(json.dumps(results))
"""


def rope_inputs(batch, heads, positions, dim, freq_batch, generator, device="cpu", dtype=torch.float32):
    """x laid out (batch, positions, heads, dim) and seen as (batch, heads, positions, dim), as
    Flux's attention rearranges it; rotation matrices of random angles, as comfy.ldm.flux.math.rope
    lays them out."""
    x = torch.randn(batch, positions, heads, dim, generator=generator).to(device, dtype)
    angles = torch.rand(freq_batch, 1, positions, dim // 2, generator=generator) * 6.3
    cos, sin = angles.cos(), angles.sin()
    freqs = torch.stack([cos, -sin, sin, cos], dim=-1).reshape(freq_batch, 1, positions, dim // 2, 2, 2)
    grad = torch.randn(batch, heads, positions, dim, generator=generator).to(device, dtype)
    return x, freqs.to(device), grad


def host_rope(x, freqs, grad):
    """The host's output and input gradient for (x, freqs) and the output's gradient `grad`."""
    x = x.detach().requires_grad_(True)
    out = HOST_ROPE(x, freqs)
    out.backward(grad)
    return out.detach(), x.grad


def test_the_kernel_gives_the_hosts_output_and_input_gradient_in_the_interpreter():
    generator = torch.Generator().manual_seed(0)
    cases = [(2, 3, 5, 8, 1), (2, 3, 5, 8, 2), (1, 2, 33, 16, 1)]  # rows not a multiple of the block
    inputs = [rope_inputs(*case, generator) for case in cases]
    payload = [{"x": x.tolist(), "freqs": f.tolist(), "grad": g.tolist()} for x, f, g in inputs]
    for (x, freqs, grad), (out, grad_in) in zip(inputs, interpreted(INTERPRETED, rope_kernel.__file__, payload)):
        expected_out, expected_grad = host_rope(x.permute(0, 2, 1, 3), freqs, grad)
        torch.testing.assert_close(torch.tensor(out), expected_out, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(torch.tensor(grad_in), expected_grad, rtol=1e-6, atol=1e-6)


def test_inputs_the_kernel_does_not_fit_take_the_hosts_function():
    generator = torch.Generator().manual_seed(1)
    x, freqs, _ = rope_inputs(1, 2, 4, 8, 1, generator)
    calls = []

    def plain(*args):
        calls.append(args)
        return HOST_ROPE(*args)

    rope1 = fused_rope.rope1(plain)
    rope1(x.permute(0, 2, 1, 3), freqs)  # on the CPU
    longer = torch.cat([freqs, freqs], dim=2)  # more positions than x: cut, as the host cuts them
    out = rope1(x.permute(0, 2, 1, 3), longer)
    assert len(calls) == 2 and calls[1][1].shape[2] == 4
    torch.testing.assert_close(out, HOST_ROPE(x.permute(0, 2, 1, 3), freqs))


def test_the_fused_rope_swaps_in_for_a_block_and_puts_the_hosts_back():
    before = flux_math.apply_rope, flux_math.apply_rope1
    with fused_flux_rope():
        assert flux_math.apply_rope1 is not before[1] and flux_math.apply_rope is not before[0]
        assert flux_math.apply_rope1.__qualname__.startswith("rope1")
    assert (flux_math.apply_rope, flux_math.apply_rope1) == before
    with fused_flux_rope(enabled=False):
        assert (flux_math.apply_rope, flux_math.apply_rope1) == before
    with pytest.raises(RuntimeError), fused_flux_rope():
        raise RuntimeError("a failed step")
    assert (flux_math.apply_rope, flux_math.apply_rope1) == before


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="the kernel runs natively on a CUDA device")


@gpu
@pytest.mark.parametrize("freq_batch", [1, 2])
def test_on_a_gpu_the_fused_rope_gives_the_hosts_bf16_output_and_gradient(freq_batch):
    generator = torch.Generator().manual_seed(2)
    x, freqs, grad = rope_inputs(2, 24, 4608, 128, freq_batch, generator, "cuda", torch.bfloat16)
    x = x.permute(0, 2, 1, 3)
    expected_out, expected_grad = host_rope(x, freqs, grad)
    leaf = x.detach().requires_grad_(True)
    out = fused_rope.rope1(HOST_ROPE)(leaf, freqs)
    out.backward(grad)
    assert out.is_contiguous() and out.dtype == torch.bfloat16
    # both compute in fp32 and round once to bf16: at most one bf16 step apart (fused multiply-adds)
    torch.testing.assert_close(out, expected_out, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(leaf.grad, expected_grad, rtol=1e-2, atol=1e-2)
    assert (out.float() - expected_out.float()).abs().mean() < 1e-4


@gpu
def test_a_kernel_that_cannot_build_falls_back_to_the_hosts_function_with_one_warning(monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("no kernel here")

    monkeypatch.setattr(rope_kernel, "rotated", broken)
    monkeypatch.setattr(fused_rope, "_FAILED", [])
    x, freqs, _ = rope_inputs(1, 2, 16, 64, 1, torch.Generator().manual_seed(3), "cuda", torch.bfloat16)
    rope1 = fused_rope.rope1(HOST_ROPE)
    with caplog.at_level(logging.WARNING):
        outs = [rope1(x.permute(0, 2, 1, 3), freqs) for _ in range(2)]
    warnings = [r.getMessage() for r in caplog.records if "fused RoPE" in r.getMessage()]
    assert len(warnings) == 1 and "no kernel here" in warnings[0]
    torch.testing.assert_close(outs[1], HOST_ROPE(x.permute(0, 2, 1, 3), freqs))
