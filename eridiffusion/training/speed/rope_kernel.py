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
    x_ptr, f_ptr, out_ptr, rows, heads, positions, sxb, sxh, sxl, sfb, sfh, sfl,
    DIM: tl.constexpr, ROWS: tl.constexpr, TRANSPOSE: tl.constexpr,
):  # fmt: skip
    """out[row, 2i + r] = sum over c of m[r, c] * x[row, 2i + c], m = f[row's position, i] (its
    transpose with TRANSPOSE); rows in (batch, head, position) order, read whole through their
    strides (each row of x contiguous, f's last three dims contiguous: pair, 2, 2), out contiguous."""
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]
    position = row % positions
    head = (row // positions) % heads
    batch = row // (positions * heads)
    columns = tl.arange(0, DIM)[None, :]
    x_mask = (row < rows) & (columns < DIM)
    x = tl.load(x_ptr + batch * sxb + head * sxh + position * sxl + columns, mask=x_mask, other=0.0)
    x0, x1 = tl.split(tl.reshape(x.to(tl.float32), (ROWS, DIM // 2, 2)))
    f_columns = tl.arange(0, 2 * DIM)[None, :]
    f_mask = (row < rows) & (f_columns < 2 * DIM)
    f = tl.load(f_ptr + batch * sfb + head * sfh + position * sfl + f_columns, mask=f_mask, other=0.0)
    first, second = tl.split(tl.reshape(f, (ROWS, DIM // 2, 2, 2)))  # m[:, 0] and m[:, 1] by row r
    m00, m10 = tl.split(first)
    m01, m11 = tl.split(second)
    if TRANSPOSE:
        m01, m10 = m10, m01
    out = tl.reshape(tl.join(m00 * x0 + m01 * x1, m10 * x0 + m11 * x1), (ROWS, DIM))
    tl.store(out_ptr + row * DIM + columns, out.to(out_ptr.dtype.element_ty), mask=x_mask)


def rotated(x, freqs, transpose=False):
    """x (batch, heads, positions, dim) rotated pairwise by freqs (batch or 1, heads or 1,
    positions, dim / 2, 2, 2; fp32), as a contiguous tensor of x's dtype; `transpose`: by each
    matrix's transpose (the input gradient's rotation)."""
    batch, heads, positions, dim = x.shape
    if x.stride(-1) != 1:
        x = x.contiguous()
    freqs = freqs.expand(batch, heads, positions, *freqs.shape[-3:])
    if freqs.stride()[-3:] != (4, 2, 1):
        freqs = freqs.contiguous()
    out = torch.empty((batch, heads, positions, dim), dtype=x.dtype, device=x.device)
    rows = batch * heads * positions
    with torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext():  # (the interpreter: CPU)
        _rope_kernel[(triton.cdiv(rows, _ROWS),)](
            x, freqs, out, rows, heads, positions, *x.stride()[:3], *freqs.stride()[:3],
            DIM=dim, ROWS=_ROWS, TRANSPOSE=transpose,
        )  # fmt: skip
    return out
