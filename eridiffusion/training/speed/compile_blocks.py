"""torch.compile of a diffusion model's blocks ("regional" compilation), switched on per clone.

Each block of the model's top-level block lists (model/blocks.py) is compiled on
its own: blocks of one kind and shape share one compiled graph, so a 57-block Flux compiles two
graphs, not one giant one, and whatever the blocks call (adapters, checkpointing) is traced with
them. Installed through ComfyUI's injection mechanism, so the shared modules are restored when
the clone unpatches.
"""

import comfy.patcher_extension
import torch
import torch._dynamo

from ..model.blocks import model_blocks

INJECTION_KEY = "eridiffusion_compile_blocks"


def compile_blocks_injection(patcher):
    blocks = model_blocks(patcher.model.diffusion_model)
    # One compiled variant per block shape: a UNet has more shapes than dynamo's default limit of
    # 8 per code object, beyond which it would silently run the remaining blocks eagerly.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, len(blocks))

    def inject(model_patcher):
        for block in blocks:
            if getattr(block, "_compiled_call_impl", None) is None:
                block.compile(dynamic=False)

    def eject(model_patcher):
        for block in blocks:
            block._compiled_call_impl = None

    patcher.set_injections(INJECTION_KEY, [comfy.patcher_extension.PatcherInjection(inject, eject)])
    return len(blocks)
