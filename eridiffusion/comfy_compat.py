"""What differs between the ComfyUI versions EriDiffusion runs on, in one place: the executor's
cache arguments, the host's training switch, and autograd for the host's fused kernels. Every
other module reaches these host internals through here (tests/test_comfy_compat.py checks each one
on every tested host)."""
import contextlib
import os
import re

import comfy.model_management
import torch

# comfy_kitchen's fused RoPE kernels (ComfyUI 0.2x+) are custom ops without a backward. Flux-style
# models switch to plain torch while `in_training` is set; others (ERNIE-Image, JoyImage) always call
# them. Rotating a pair by a 2x2 matrix has the transposed matrix as its input gradient.
_ROPE_OPS = {"apply_rope1": 1, "apply_rope_split_half1": 1, "apply_rope": 2, "apply_rope_split_half": 2}
_rope_backwards_registered = []


def host_version():
    """The host's version string ("0.3.75", "0.28.0"), read from its comfyui_version.py."""
    import folder_paths
    path = os.path.join(os.path.dirname(os.path.abspath(folder_paths.__file__)), "comfyui_version.py")
    with open(path, encoding="utf-8") as f:
        return re.search(r'__version__\s*=\s*"([^"]+)"', f.read()).group(1)


def prompt_executor(server):
    """ComfyUI's PromptExecutor without an output cache between prompts. 0.2x reads ram_inactive
    as well as ram; older versions ignore keys they do not know."""
    import execution
    return execution.PromptExecutor(server, cache_type=execution.CacheType.CLASSIC,
                                    cache_args={"lru": 0, "ram": 0, "ram_inactive": 0})


@contextlib.contextmanager
def training_forward():
    """ComfyUI's own training switch (`model_management.in_training`, 0.2x), on for a training
    forward and backward: the host then takes its differentiable code paths."""
    register_fused_rope_backwards()
    has_switch = hasattr(comfy.model_management, "in_training")
    previous = getattr(comfy.model_management, "in_training", None)
    if has_switch:
        comfy.model_management.in_training = True
    try:
        yield
    finally:
        if has_switch:
            comfy.model_management.in_training = previous


def _transposed(freqs):
    return freqs.transpose(-1, -2).contiguous()


def _backward_for(op_name, tensors):
    op = getattr(torch.ops.comfy_kitchen, op_name)

    def setup_context(ctx, inputs, output):
        ctx.freqs = inputs[tensors]

    if tensors == 1:
        def backward(ctx, grad):
            return op(grad.contiguous(), _transposed(ctx.freqs)), None
    else:
        def backward(ctx, grad_q, grad_k):
            return (*op(grad_q.contiguous(), grad_k.contiguous(), _transposed(ctx.freqs)), None)
    return backward, setup_context


def register_fused_rope_backwards():
    """Give comfy_kitchen's RoPE ops their backward (once per process; nothing on hosts without
    comfy_kitchen)."""
    if _rope_backwards_registered:
        return
    _rope_backwards_registered.append(True)
    for name, tensors in _ROPE_OPS.items():
        if not hasattr(torch.ops.comfy_kitchen, name):
            continue
        backward, setup_context = _backward_for(name, tensors)
        torch.library.register_autograd(f"comfy_kitchen::{name}", backward, setup_context=setup_context)
