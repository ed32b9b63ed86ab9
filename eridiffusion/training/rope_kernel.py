"""Flux's rotary position embedding (interleaved pairs) in one Triton kernel: each pair of a query
or key row rotated by its position's 2x2 matrix, in fp32, written once in the input's dtype. The
host's training path (comfy.ldm.flux.math._apply_rope1) computes the same numbers through an fp32
copy of the tensor and three more full-size passes, forward and backward; the backward here is the
same kernel with each matrix transposed.

Importing this module needs Triton (it comes with torch's Linux CUDA wheels); the kernel compiles
on first use, which CUDA graphs' warm-up steps make before capture.
"""

import contextlib

import torch
import triton
import triton.language as tl

_ROWS = 16  # (batch, head, position) rows per program


@triton.jit
def _rope_kernel(
    x_ptr, f_ptr, out_ptr, rows, heads, positions, sxb, sxh, sxl, sxd, sfb, sfh, sfl,
    HALF: tl.constexpr, ROWS: tl.constexpr, TRANSPOSE: tl.constexpr,
):  # fmt: skip
    """out[row, 2i + r] = sum over c of m[r, c] * x[row, 2i + c], m = f[row's position, i] (its
    transpose with TRANSPOSE); rows in (batch, head, position) order, x and f read through their
    strides (f's last three dims contiguous: pair, 2, 2), out contiguous."""
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]
    pair = tl.arange(0, HALF)[None, :]
    mask = (row < rows) & (pair < HALF)
    position = row % positions
    head = (row // positions) % heads
    batch = row // (positions * heads)
    x_row = x_ptr + batch * sxb + head * sxh + position * sxl
    x0 = tl.load(x_row + (2 * pair) * sxd, mask=mask, other=0.0).to(tl.float32)
    x1 = tl.load(x_row + (2 * pair + 1) * sxd, mask=mask, other=0.0).to(tl.float32)
    f_pair = f_ptr + batch * sfb + head * sfh + position * sfl + pair * 4
    m00 = tl.load(f_pair, mask=mask, other=0.0)
    m11 = tl.load(f_pair + 3, mask=mask, other=0.0)
    if TRANSPOSE:
        m01 = tl.load(f_pair + 2, mask=mask, other=0.0)
        m10 = tl.load(f_pair + 1, mask=mask, other=0.0)
    else:
        m01 = tl.load(f_pair + 1, mask=mask, other=0.0)
        m10 = tl.load(f_pair + 2, mask=mask, other=0.0)
    out_row = out_ptr + row * (2 * HALF)
    tl.store(out_row + 2 * pair, (m00 * x0 + m01 * x1).to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_row + 2 * pair + 1, (m10 * x0 + m11 * x1).to(out_ptr.dtype.element_ty), mask=mask)


def rotated(x, freqs, transpose=False):
    """x (batch, heads, positions, dim) rotated pairwise by freqs (batch or 1, heads or 1,
    positions, dim / 2, 2, 2; fp32), as a contiguous tensor of x's dtype; `transpose`: by each
    matrix's transpose (the input gradient's rotation)."""
    batch, heads, positions, dim = x.shape
    freqs = freqs.expand(batch, heads, positions, *freqs.shape[-3:])
    if freqs.stride()[-3:] != (4, 2, 1):
        freqs = freqs.contiguous()
    out = torch.empty((batch, heads, positions, dim), dtype=x.dtype, device=x.device)
    rows = batch * heads * positions
    with torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext():  # (the interpreter: CPU)
        _rope_kernel[(triton.cdiv(rows, _ROWS),)](
            x, freqs, out, rows, heads, positions, *x.stride(), *freqs.stride()[:3],
            HALF=dim // 2, ROWS=_ROWS, TRANSPOSE=transpose,
        )  # fmt: skip
    return out
