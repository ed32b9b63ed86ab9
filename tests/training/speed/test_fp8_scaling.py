"""The fused fp8 scaling kernels (adapters/fp8_scaling.py): their maximum and power-of-two scale are
the eager formula's at every boundary, on the CPU through Triton's interpreter; and on an fp8 GPU
the whole scaled cast gives the eager kernels' values bit for bit. (The interpreter's own fp32-to-fp8
conversion rounds differently from the GPU's, so only the GPU test compares the fp8 values.)"""

import os

import pytest
import torch

from devkit.devices import fp8_gpu
from devkit.triton_interpreter import interpreted
from eridiffusion.training.speed import fp8_products
from eridiffusion.training.speed.fp8_products import E4M3, E5M2, power_of_two_scale, quantized, quantized_eagerly

triton = pytest.importorskip("triton")

FP8_SCALING = os.path.join(os.path.dirname(fp8_products.__file__), "fp8_scaling.py")

# the kernels on each case's values, through Triton's interpreter (devkit.triton_interpreter)
INTERPRETED = """
results = []
for case in json.load(sys.stdin):
    t = torch.tensor(case["values"], dtype=getattr(torch, case["dtype"]))
    n = t.numel()
    amax, scale = torch.zeros(1), torch.empty(())
    q = torch.empty(n, dtype=torch.float8_e4m3fn)
    kernels._abs_max_kernel[(3,)](t, amax, n, triton.cdiv(triton.cdiv(n, 128), 3), BLOCK=128)  # 3 programs stride
    kernels._scaled_cast_kernel[(triton.cdiv(n, 128),)](t, amax, q, scale, n, FP8_MAX=case["largest"], BLOCK=128)
    results.append([amax.item(), scale.item()])
print(json.dumps(results))
"""


def cases():
    """Tensors whose maximum sits on, just above and just below the powers of two of the scale."""
    generator = torch.Generator().manual_seed(0)
    found = []
    for fp8_dtype in (E4M3, E5M2):
        largest = torch.finfo(fp8_dtype).max
        above = torch.nextafter(torch.tensor(largest), torch.tensor(float("inf"))).item()  # ratio: 1 + 1 ulp
        for maximum in (largest, above, largest * 2.0**-20, largest * 2.0**12, 449.0, largest * 0.999, 3.0, 1e-30, 0.0):
            for dtype in (torch.float32, torch.bfloat16):
                values = torch.randn(1000, generator=generator) * maximum / 4
                values = values.clamp(-maximum, maximum).to(dtype)
                values[517] = -torch.tensor(maximum).to(dtype)  # the maximum, negative, in the last block
                found.append((fp8_dtype, values))
    return found


@pytest.mark.skipif(
    tuple(int(part) for part in triton.__version__.split(".")[:2]) < (3, 8),
    reason="Triton before 3.8 interprets a loop's runtime bound as an array and fails (3.6, ComfyUI 0.28's venv); "
    "the GPU test covers the kernels there",
)
def test_the_kernels_maximum_and_scale_are_the_eager_formulas_at_every_power_of_two_boundary():
    tested = cases()
    payload = [
        {"values": values.float().tolist(), "dtype": str(values.dtype).split(".")[1], "largest": torch.finfo(f).max}
        for f, values in tested
    ]
    for (fp8_dtype, values), (amax, scale) in zip(tested, interpreted(INTERPRETED, FP8_SCALING, payload)):
        assert amax == values.abs().max().float().item()
        assert scale == power_of_two_scale(values, fp8_dtype).item(), (fp8_dtype, amax)


@pytest.mark.skipif(not fp8_gpu(), reason="fp8 tensor cores need an Ada or Hopper GPU")
@pytest.mark.parametrize("fp8_dtype", [E4M3, E5M2])
def test_on_an_fp8_gpu_the_fused_scaling_gives_the_eager_kernels_values_bit_for_bit(fp8_dtype):
    generator = torch.Generator(device="cuda").manual_seed(0)
    shapes = [(4096, 3072), (512, 3072), (4608, 1536), (64, 48)]
    for rows, columns in shapes:
        for magnitude in (1e-3, 1.0, 3e3):
            t = torch.randn(rows, columns, device="cuda", generator=generator).to(torch.bfloat16) * magnitude
            for tensor in (t, t.t()):  # a transposed gradient: the result is row-major all the same
                q, scale = quantized(tensor, fp8_dtype)
                eager_q, eager_scale = quantized_eagerly(tensor.contiguous(), fp8_dtype)
                assert q.is_contiguous() and q.shape == tensor.shape
                assert torch.equal(scale, eager_scale)
                assert torch.equal(q.view(torch.uint8), eager_q.view(torch.uint8)), (rows, columns, magnitude)
    assert fp8_products._FUSED.failure is None  # the Triton kernels ran, not the fallback
