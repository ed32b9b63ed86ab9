"""fp8 compute for the frozen base: an adapted linear layer's x·Wᵀ + b, and its input gradient g·W,
as fp8 matrix products with per-tensor scales (`torch._scaled_mm`); the adapters' own products
stay in the activations' dtype, their master weights in fp32.

Scaling is per tensor and current: each product quantizes its activation (forward, e4m3) or its
incoming gradient (backward, e5m2, the wider range gradients need) by that tensor's own absolute
maximum, rounded up to a power of two so that scaling is exact in any dtype (on a GPU in two fused
Triton kernels, fp8_scaling; elsewhere in eager ones). The frozen weight is
quantized once per run (e4m3), or used as it is when the model was loaded in float8_e4m3fn
(UNETLoader's weight_dtype); the backward's product also needs it column-major, a second fp8 copy.
So fp8 compute holds, while a run trains, one extra byte per weight of the layers it computes
(bf16 weights: two), which is the memory it trades for speed. Tensor-core fp8 needs an Ada or Hopper GPU
(compute capability 8.9+); `check_fp8_compute` says so before a run starts.

Only what the product can take is computed in fp8: a layer whose class forward is a plain linear
one with no weight patches, its weight on the activations' device, both weight dimensions a
multiple of 16 (tensor-core tiles), at least 16 rows of input, and a product large and wide enough
to gain (MIN_MACS, MIN_WIDTH). Other layers (and a layer whose
weights ComfyUI streams from CPU memory) compute as they always do.
"""

import logging
from collections.abc import Callable
from typing import Any

import torch

from ...errors import EriDiffusionError, first_line
from ..adapters.lora_linear import computes_its_weights_product

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
_WEIGHT_DTYPES = (E4M3, torch.bfloat16, torch.float16, torch.float32)
_ACTIVATION_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_ALIGN = 16  # fp8 tensor-core products need both dimensions of the weight a multiple of 16
MIN_ROWS = 16  # fewer input rows (a modulation vector, a pooled embedding): not worth the scaling
# Products smaller than this many multiply-adds (rows x in x out), or with a weight narrower than
# MIN_WIDTH on either side, stay in the activations' dtype. With the fused scaling (fp8_scaling),
# forward plus input gradient in fp8 took 0.66-0.85x the bf16 time for every layer of Flux.1-dev at
# 1024² on an H100, down to its text stream's qkv (512 x 3072 x 9216, 1.4e10: 0.79x), and 0.81x for
# SDXL's 1280-wide ff.0 (1024 x 1280 x 10240); but 1.35-1.9x for SDXL's 640-wide layers, its ff.0
# (4096 x 640 x 5120, 1.3e10) included, and for its attention, where scaling costs about as much as
# the product (bench/fp8_products.py, bench/results/2026-11-24_fp8_products_fused_h100.json).
MIN_MACS = 10**10
MIN_WIDTH = 1024

log = logging.getLogger(__name__)


def power_of_two_scale(t, fp8_dtype):
    """The per-tensor scale of `t` for `fp8_dtype`: its absolute maximum over the format's largest
    value, rounded up to a power of two (an fp32 0-dim tensor on t's device; no host sync)."""
    amax = torch.linalg.vector_norm(t, ord=float("inf"), dtype=torch.float32)
    ratio = amax.div_(torch.finfo(fp8_dtype).max).clamp_(min=torch.finfo(torch.float32).tiny)
    return torch.exp2(torch.ceil(torch.log2(ratio)))


def quantized(t, fp8_dtype):
    """(t / scale in `fp8_dtype`, scale): every value in range, since the scale covers the maximum.
    The result is row-major whatever t's layout (fp8 products read their first operand so). The
    division is exact (a power of two). On a GPU, two Triton kernels (fp8_scaling); elsewhere, or
    where those cannot build, eager kernels with the same values."""
    if t.is_cuda and _FUSED.usable():
        scaled_cast = _FUSED.scaled_cast
        assert scaled_cast is not None  # usable() imported it
        try:
            q, scale = scaled_cast(t.reshape(-1), fp8_dtype)
            return q.view(t.shape), scale
        except Exception as error:  # noqa: BLE001 - a kernel that cannot build: the eager ones give the same values
            if isinstance(error, torch.OutOfMemoryError) or torch.cuda.is_current_stream_capturing():
                raise  # not the compiler's; or a capture, which fails whole (cuda_graphs falls back)
            _FUSED.failed(error)
    return quantized_eagerly(t, fp8_dtype)


def quantized_eagerly(t, fp8_dtype):
    """quantized() in eager kernels: the scale's chain of small ones, then the multiply cast to
    fp8 as it is stored."""
    scale = power_of_two_scale(t, fp8_dtype)
    q = torch.empty(t.shape, dtype=fp8_dtype, device=t.device)
    torch.mul(t, scale.reciprocal(), out=q)
    return q, scale


class _FusedScaling:
    """fp8_scaling's Triton kernels, imported on first use. Where Triton is missing or its kernels
    cannot build (no C compiler for its launcher), the reason is logged once and the eager kernels
    scale for the rest of the process."""

    def __init__(self):
        self.scaled_cast: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
        self.failure: str | None = None  # why the eager kernels scale instead

    def usable(self):
        if self.failure is None and self.scaled_cast is None:
            try:
                from .fp8_scaling import scaled_cast
            except ImportError as error:
                self.failed(error)
            else:
                self.scaled_cast = scaled_cast
        return self.failure is None

    def failed(self, error):
        self.failure = first_line(error)
        log.warning(
            "fp8_compute: the fused fp8 scaling kernels are not available (%s); activations are scaled by "
            "eager kernels instead (same values, slower)",
            self.failure,
        )


_FUSED = _FusedScaling()


def scaling_failure():
    """Why the eager kernels scale the activations instead of the fused ones, or None."""
    return _FUSED.failure


class Fp8Linear(torch.autograd.Function):
    """y = x·Wᵀ + b with x quantized to e4m3 and W given in e4m3 (scale w_scale), row-major and as
    the column-major copy the backward's product reads; ∂x = g·W with g in e5m2. W and b are
    frozen: no gradient for them."""

    @staticmethod
    def forward(ctx, x, weight8, weight8_columns, weight_scale, bias):
        flat = x.reshape(-1, x.shape[-1])
        x8, x_scale = quantized(flat, E4M3)
        # written into the output's flat form: the output is returned whole, never as a view (model
        # code may write into it in place)
        out = x.new_empty((*x.shape[:-1], weight8.shape[0]))
        torch._scaled_mm(
            x8, weight8.t(), x_scale, weight_scale, bias=bias, out_dtype=x.dtype, out=out.view(-1, weight8.shape[0])
        )
        ctx.save_for_backward(weight8_columns, weight_scale)
        ctx.input_shape = x.shape
        return out

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        weight8_columns, weight_scale = ctx.saved_tensors
        flat = grad.reshape(-1, grad.shape[-1])
        g8, g_scale = quantized(flat, E5M2)
        grad_x = grad.new_empty(ctx.input_shape)
        torch._scaled_mm(
            g8,
            weight8_columns,
            g_scale,
            weight_scale,
            out_dtype=grad.dtype,
            out=grad_x.view(-1, weight8_columns.shape[1]),
        )
        return grad_x, None, None, None, None


def _fp8_weight_scale(layer, weight):
    """The dequantization scale of an e4m3 weight as ComfyUI loaded it: 1, or the layer's own
    one-element `scale_weight` (scaled fp8 checkpoints); None for other scalings."""
    scale = getattr(layer, "scale_weight", None)
    if scale is None:
        return torch.ones((), dtype=torch.float32, device=weight.device)
    if isinstance(scale, torch.Tensor) and scale.numel() == 1:
        return scale.detach().reshape(()).to(device=weight.device, dtype=torch.float32)
    return None


class Fp8Products:
    """The fp8 weights of the layers one run's adapters sit on, quantized on first use and kept
    while the run trains (`clear` lets them go). `forward_of(base, x)` gives the frozen layer's
    forward in fp8 where the layer and `x` allow it, else `base` itself."""

    def __init__(self, min_macs=None):
        self._forwards = {}  # id(layer): Fp8Forward
        self.min_macs = min_macs  # the smallest product computed in fp8 (None: MIN_MACS, read when asked)

    def forward_of(self, base, x):
        layer = getattr(base, "layer", None)
        if layer is None:
            return base
        forward = self._forwards.get(id(layer))
        if forward is None or forward.frozen_layer is not layer:
            forward = self._forwards[id(layer)] = Fp8Forward(layer)
        return forward if forward.takes(x, MIN_MACS if self.min_macs is None else self.min_macs) else base

    def layers_in_fp8(self):
        """(adapted layers whose frozen product has run in fp8, adapted layers seen so far)."""
        cached = [f.cached for f in self._forwards.values()]
        return sum(1 for c in cached if c is not None and c[1] is not None), len(cached)

    def clear(self):
        self._forwards = {}


class Fp8Forward:
    """The frozen product of one layer in fp8, its weight cached as (key, (e4m3 weight, its
    column-major copy, scale, bias)); `takes(x)` says whether an input can be computed so."""

    # not `layer`: lora_linear computes the frozen product itself for a base that carries its layer
    __slots__ = ("frozen_layer", "cached")

    def __init__(self, layer):
        self.frozen_layer = layer
        # (key, its fp8 tensors, or None where the weight cannot be computed so), set by takes()
        self.cached: tuple[Any, tuple[torch.Tensor, ...] | None] | None = None

    def __call__(self, x):
        cached = self.cached
        assert cached is not None and cached[1] is not None  # takes(x) said it can
        return Fp8Linear.apply(x, *cached[1])

    def takes(self, x, min_macs):
        layer = self.frozen_layer
        if x.dtype not in _ACTIVATION_DTYPES or x.dim() < 2 or x.numel() < MIN_ROWS * x.shape[-1]:
            return False
        if x.numel() * layer.weight.shape[0] < min_macs or min(layer.weight.shape[:2]) < MIN_WIDTH:
            return False
        if not computes_its_weights_product(layer):
            return False
        weight, bias = layer.weight, layer.bias
        if type(weight) not in (torch.nn.Parameter, torch.Tensor) or weight.device != x.device:
            return False
        if weight.dtype not in _WEIGHT_DTYPES or weight.shape[0] % _ALIGN or weight.shape[1] % _ALIGN:
            return False
        if bias is not None and bias.device != x.device:
            return False
        key = (weight.data_ptr(), weight.dtype, None if bias is None else bias.data_ptr(), x.dtype)
        if self.cached is None or self.cached[0] != key:
            self.cached = (key, _fp8_weights(layer, weight, bias, x.dtype))
        return self.cached[1] is not None


def _fp8_weights(layer, weight, bias, dtype):
    """(e4m3 weight, its column-major copy, their scale, bias in `dtype`) of a layer, or None where
    its fp8 weight has a scaling this module does not read. The second operand of an fp8 product
    is read column-major, so the input gradient g·W needs W (out, in) as its transpose's
    transpose: made once here, as transposing it in every backward took as long as the product
    (bench/fp8_products.py)."""
    with torch.no_grad():
        if weight.dtype == E4M3:
            scale = _fp8_weight_scale(layer, weight)
            if scale is None:
                return None
            weight8 = weight.detach()
        else:
            weight8, scale = quantized(weight.detach(), E4M3)
        columns = weight8.t().contiguous().t()
        return weight8, columns, scale, None if bias is None else bias.detach().to(dtype)


def check_fp8_compute(device):
    """Stop with a clear error before training where `device` cannot run fp8 products."""
    try:
        a = torch.ones((MIN_ROWS, _ALIGN), device=device).to(E5M2)
        b = torch.ones((_ALIGN, _ALIGN), device=device).to(E4M3)
        one = torch.ones((), device=device)
        torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as error:
        reason = first_line(error)
        raise EriDiffusionError(
            f"fp8_compute: this device ({device}) cannot run fp8 matrix products ({reason}). fp8 tensor cores "
            "need an NVIDIA Ada or Hopper GPU (compute capability 8.9 or newer) and a torch built for it; turn "
            "fp8_compute off."
        ) from error
