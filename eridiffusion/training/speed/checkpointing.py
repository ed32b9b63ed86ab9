"""Gradient checkpointing of a ComfyUI diffusion model's blocks, switched on per model clone.

Each block of the model's top-level block lists (UNet resnets and transformers, DiT blocks), or of a
trained text encoder's transformer (model/text_encoder.py), recomputes its activations in backward
instead of storing them. Installed through
ComfyUI's injection mechanism, so the shared modules are restored when the clone unpatches.
"""

import contextlib

import comfy.patcher_extension
import torch
import torch.utils.checkpoint

from ..adapters.forward_swap import SwappedForward, swap_in, swap_out
from ..model.autograd_inplace import OutOfPlaceAugmentedAssignments
from ..model.autograd_saved import saved_activations_copied
from ..model.blocks import model_blocks

INJECTION_KEY = "eridiffusion_gradient_checkpointing"


class _CheckpointedForward(SwappedForward):
    def __init__(self, module, copy_saved):
        super().__init__(module)
        self.copy_saved = copy_saved

    def __call__(self, *args, **kwargs):
        if not torch.is_grad_enabled():
            return self.base(*args, **kwargs)
        # No RNG stash: ComfyUI's diffusion models draw no random numbers in forward (no dropout
        # in use), and reading the CUDA RNG state is not allowed inside a CUDA graph capture.
        return torch.utils.checkpoint.checkpoint(
            self._run, *args, use_reentrant=False, preserve_rng_state=False, **kwargs
        )

    def _run(self, *args, **kwargs):
        # Blocks that add residuals in place (Flux: `img += ...`) would overwrite their own inputs,
        # so the recomputation in backward would start from the wrong values, silently; the
        # recomputation runs outside the forward's context, hence entering it here.
        # The same holds for the saved-activation copies some families need (autograd_saved.py).
        with (
            OutOfPlaceAugmentedAssignments(),
            saved_activations_copied() if self.copy_saved else contextlib.nullcontext(),
        ):
            return self.base(*args, **kwargs)


def checkpointing_injection(patcher, copy_saved=False, blocks=None):
    """Checkpoint the blocks of `patcher`'s model whenever it is patched; `copy_saved`: the
    recomputed blocks also save copies of their activations (families whose forward writes in
    place into saved tensors). `blocks`: the modules to checkpoint (else the diffusion model's)."""
    if blocks is None:
        blocks = model_blocks(patcher.model.diffusion_model)

    def inject(model_patcher):
        for block in blocks:
            swap_in(block, _CheckpointedForward, copy_saved)

    def eject(model_patcher):
        for block in blocks:
            swap_out(block, _CheckpointedForward)

    patcher.set_injections(INJECTION_KEY, [comfy.patcher_extension.PatcherInjection(inject, eject)])
    return len(blocks)
