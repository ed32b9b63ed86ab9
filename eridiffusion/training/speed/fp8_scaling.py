"""Per-tensor fp8 scaling on a GPU in two Triton kernels: the absolute maximum of a tensor, then
the power-of-two scale and the scaled cast to fp8 in one pass. It computes what
fp8_products.quantized_eagerly computes, bit for bit, where eager PyTorch takes a dozen small
kernels for the scale and a multiply cast to fp8 at a quarter of a plain cast's bandwidth (an
H100, Flux's 4096 x 3072 activations: 70 µs eager, 18 µs here; bench/fp8_products.py).

Importing this module needs Triton (it comes with torch's Linux CUDA wheels); its kernels compile
on first use, which CUDA graphs' warm-up steps make before capture.
"""

import torch
import triton
import triton.language as tl

_FP8_TYPES = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}  # each format's largest value
_AMAX_BLOCK, _CAST_BLOCK = 4096, 4096
_PROGRAMS_PER_SM = 4  # the maximum's grid: enough programs to fill the GPU, few atomics


@triton.jit
def _abs_max_kernel(x_ptr, amax_ptr, n, blocks_per_program, BLOCK: tl.constexpr):
    """amax[0] = max |x| over n elements: program p reads blocks p, p + programs, ... (64-bit
    offsets: any length), then one atomic."""
    first = tl.program_id(0).to(tl.int64)
    largest = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, blocks_per_program):
        offsets = (first + i * tl.num_programs(0)) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
        largest = tl.maximum(largest, tl.abs(x.to(tl.float32)))
    tl.atomic_max(amax_ptr, tl.max(largest, axis=0))


@triton.jit
def _scaled_cast_kernel(x_ptr, amax_ptr, q_ptr, scale_ptr, n, FP8_MAX: tl.constexpr, BLOCK: tl.constexpr):
    """q = x / scale in q's fp8 type, scale = amax / FP8_MAX rounded up to a power of two (at least
    the smallest normal fp32): its exponent, plus one unless the mantissa is zero. Written by the
    first program."""
    ratio = tl.maximum(tl.math.div_rn(tl.load(amax_ptr), FP8_MAX), 1.1754943508222875e-38)
    scale = ((ratio.to(tl.int32, bitcast=True) + 0x7FFFFF) & 0x7F800000).to(tl.float32, bitcast=True)
    inverse = tl.math.div_rn(1.0, scale)  # exact: a power of two
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(q_ptr + offsets, (x.to(tl.float32) * inverse).to(q_ptr.dtype.element_ty), mask=mask)
    if tl.program_id(0) == 0:
        tl.store(scale_ptr, scale)


def scaled_cast(flat, fp8_dtype):
    """(flat / scale in `fp8_dtype`, scale) for a contiguous 1-D CUDA tensor; scale is an fp32
    0-dim tensor. Three launches (a zeroed maximum, the two kernels),
    no host sync."""
    n = flat.numel()
    amax = torch.zeros(1, dtype=torch.float32, device=flat.device)
    q = torch.empty(n, dtype=fp8_dtype, device=flat.device)
    scale = torch.empty((), dtype=torch.float32, device=flat.device)
    processors = torch.cuda.get_device_properties(flat.device).multi_processor_count
    blocks = triton.cdiv(n, _AMAX_BLOCK)
    programs = max(1, min(blocks, _PROGRAMS_PER_SM * processors))
    with torch.cuda.device(flat.device):
        _abs_max_kernel[(programs,)](flat, amax, n, triton.cdiv(blocks, programs), BLOCK=_AMAX_BLOCK, num_warps=8)
        _scaled_cast_kernel[(triton.cdiv(n, _CAST_BLOCK),)](
            flat, amax, q, scale, n, FP8_MAX=_FP8_TYPES[fp8_dtype], BLOCK=_CAST_BLOCK, num_warps=8
        )
    return q, scale
