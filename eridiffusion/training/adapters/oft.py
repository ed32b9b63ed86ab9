"""OFT and BOFT: the layer's weight rotated by a learned orthogonal matrix, W' = R·W, R block-diagonal
(OFT) or a product of butterfly stages (BOFT), through LyCORIS's DiagOFTModule and
ButterflyOFTModule; saved as `oft_blocks` (3-D: OFT, 4-D: BOFT) with `alpha`, the keys ComfyUI's
weight_adapter loads.

`rank` sizes the blocks as in LyCORIS and ComfyUI's own trainer (the block size is the factor of the
layer's width nearest it). No norm constraint: ComfyUI reads `alpha` as the constraint itself where
LyCORIS multiplies it by the layer's width, so a constrained file would load differently; `alpha` is
unused. Only the weight turns, as ComfyUI merges the file: the frozen layer's bias is taken out of its
output before the rotation and added back after. A strength s (LoraLoader's, or the trainer's
multiplier) applies as ComfyUI's loader applies it: each rotation blended s·R + (1-s)·I, and the
weight change times s again."""

import logging
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode

from ...errors import EriDiffusionError
from .base import LycorisAdapter, seeded


@contextmanager
def quiet_lycoris():
    """LyCORIS logs each OFT/BOFT layer's block split at INFO: hundreds of lines a model."""
    logger = logging.getLogger("LyCORIS")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


class UncheckedInverse(TorchFunctionMode):
    """LyCORIS's rotation R = (I + Q)(I - Q)^-1, Q skew-symmetric, with the inverse computed without
    its singularity check: I - Q has eigenvalues 1 - iλ and is never singular, and the check reads a
    flag back from the device on every layer's every call, which a CUDA graph capture refuses
    ("operation not permitted when stream is capturing", the GPU suite, 2026-11-29)."""

    INVERSES = {torch.Tensor.inverse, torch.inverse, torch.linalg.inv}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.INVERSES:
            return torch.linalg.inv_ex(args[0], check_errors=False).inverse
        return func(*args, **(kwargs or {}))


def bias_of(layer, like):
    """The frozen layer's bias shaped to broadcast over an output `like` (channels last for linear
    layers, second for convolutions), in its dtype and device; None without one."""
    bias = getattr(layer, "bias", None)
    if bias is None:
        return None
    bias = bias.to(like.device, like.dtype)
    if isinstance(layer, torch.nn.Linear):
        return bias
    return bias.view(1, -1, *([1] * (like.dim() - 2)))


class OFT(LycorisAdapter):
    algorithm = "oft"

    def __init__(self, layer, rank, alpha, seed=0):
        with seeded(seed):
            super().__init__(self.module(layer, rank))
        self.layer = [layer]  # not a submodule: the frozen layer stays the model's

    @staticmethod
    def module(layer, rank):
        from lycoris.modules.diag_oft import DiagOFTModule  # LyCORIS (and bitsandbytes) load when an adapter is made

        with quiet_lycoris():
            return DiagOFTModule("", layer, lora_dim=rank, constraint=0)

    def forward(self, x, base):
        out = base(x)
        if self.multiplier == 0:
            return out
        bias = bias_of(self.layer[0], out)
        weight_part = out if bias is None else out - bias
        lycoris, forward = self.lycoris, self.lycoris.org_forward
        lycoris.org_forward = lambda _: weight_part  # LyCORIS rotates what the layer computes
        try:
            with UncheckedInverse():
                return out + self.multiplier * self.turned(x, self.multiplier)
        finally:
            lycoris.org_forward = forward

    def turned(self, x, s):
        """(R_s - I)·W·x, R_s = s·R + (1-s)·I: for one block rotation that is s·(R - I)·W·x (and
        LyCORIS's own path for s != 1 fails on outputs that are not contiguous)."""
        return s * self.lycoris.bypass_forward_diff(x, scale=1.0)

    def comfy_tensors(self):
        return {name: t.detach() for name, t in self.tensor_targets().items()}

    def tensor_targets(self):
        return {"oft_blocks": self.lycoris.oft_blocks, "alpha": self.lycoris.alpha}


STOCK_MERGE_NOTE = (
    "BOFT: stock ComfyUI (0.28, and upstream's weight_adapter/boft.py as of this writing) applies a BOFT "
    "file at a strength other than 1.0 only where it merges LoRA patches in fp32: on a GPU it merges them "
    "in fp16, and there its BOFT merge at such a strength fails ('ERROR boft ... expected scalar type Float "
    "but found Half' in its log), leaving those layers unpatched. At strength 1.0 it applies everywhere. "
    "The file is right (it reproduces at every strength in fp32 merges: the CPU, ComfyUI 0.3.x, "
    "--force-fp32); for another strength on a GPU, use this trainer's MODEL output, or OFT or LoRA."
)


class BOFT(OFT):
    algorithm = "boft"
    stock_loader_note = STOCK_MERGE_NOTE

    @staticmethod
    def module(layer, rank):
        from lycoris.modules.boft import ButterflyOFTModule, butterfly_factor

        with quiet_lycoris():
            try:
                return ButterflyOFTModule("", layer, lora_dim=rank, constraint=0)
            except ValueError:  # the width has no butterfly split near this rank
                width = layer.weight.shape[0]
                fits = [r for r in range(2, 65) if _splits(butterfly_factor, width, r)]
                raise EriDiffusionError(
                    f"BOFT cannot split a layer {width} wide into butterfly blocks at rank {rank}; ranks that split "
                    f"it: {', '.join(map(str, fits)) or 'none up to 64'}. Use one of them (every adapted layer "
                    "must split), or algorithm oft."
                ) from None

    def turned(self, x, s):
        """(R_s - I)·W·x, R_s the product of the butterfly stages each blended s·R + (1-s)·I."""
        return self.lycoris.bypass_forward_diff(x, scale=s)


def _splits(butterfly_factor, width, rank):
    try:
        butterfly_factor(width, rank)
    except ValueError:
        return False
    return True
