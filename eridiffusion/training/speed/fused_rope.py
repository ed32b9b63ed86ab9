"""Flux's RoPE for training, fused (rope_kernel) where it applies: a CUDA tensor of 4 dims whose
head size is a power of two, with position matrices in fp32 that need no gradient. Anything else,
or a GPU where the kernel cannot be built, takes the host's own plain function (the latter with one
warning, for the rest of the process)."""

import contextlib
import logging

import torch

from ...comfy_compat import flux_rope_replaced

_FAILED: list[Exception] = []  # the error that stopped the kernel in this process, if one did


class _Rotation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, freqs):
        from .rope_kernel import rotated

        ctx.save_for_backward(freqs)
        return rotated(x, freqs)

    @staticmethod
    def backward(ctx, grad):
        from .rope_kernel import rotated

        (freqs,) = ctx.saved_tensors
        return rotated(grad, freqs, transpose=True), None


def _fits(x, freqs):
    """Whether the kernel computes what the host's function does for these inputs (freqs already
    cut to x's positions)."""
    if not (x.is_cuda and x.dim() == 4 and freqs.dim() == 6 and freqs.dtype == torch.float32):
        return False
    if freqs.requires_grad or freqs.device != x.device or freqs.shape[-2:] != (2, 2):
        return False
    half = x.shape[-1] // 2
    if x.shape[-1] != 2 * half or freqs.shape[-3] != half or half & (half - 1):
        return False
    return all(f in (1, n) for f, n in zip(freqs.shape[:3], x.shape[:3]))


def rope1(plain):
    """apply_rope1(x, freqs_cis) computing `plain`'s values with the fused kernel where it fits."""

    def apply_rope1(x, freqs_cis):
        if freqs_cis.dim() == 6 and freqs_cis.shape[2] not in (1, x.shape[2]) and x.dim() == 4:
            freqs_cis = freqs_cis[:, :, : x.shape[2]]  # as the host cuts them
        if _FAILED or not _fits(x, freqs_cis):
            return plain(x, freqs_cis)
        try:
            return _Rotation.apply(x, freqs_cis)
        except Exception as error:  # Triton missing, or its kernel cannot build on this GPU
            if isinstance(error, torch.OutOfMemoryError) or torch.cuda.is_current_stream_capturing():
                raise
            _FAILED.append(error)
            logging.warning(
                f"EriDiffusion: the fused RoPE kernel is not available here ({type(error).__name__}: "
                f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}); RoPE runs in plain "
                "PyTorch, slower."
            )
            return plain(x, freqs_cis)

    return apply_rope1


@contextlib.contextmanager
def fused_flux_rope(enabled=True):
    """Flux's RoPE as one fused kernel per query or key for the block (`enabled`), where the host's
    training path makes an fp32 copy and three more full-size passes; the host's after."""
    with flux_rope_replaced(rope1) if enabled else contextlib.nullcontext():
        yield
