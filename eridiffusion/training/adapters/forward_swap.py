"""Putting a wrapper object in place of a module's forward while ComfyUI has a training clone
patched, and giving back exactly what was there (no forward of the instance's own, or the one some
other code set). Adapters (adapters/attach.py) and gradient checkpointing (checkpointing.py) use it."""


class SwappedForward:
    """Base of the wrappers: `base` is the forward it stands in for."""

    def __init__(self, module):
        self.replaced = module.__dict__.get("forward")  # an instance-level forward to give back
        self.base = module.forward


def swap_in(module, wrapper_type, *args):
    """The module's `wrapper_type` wrapper, installed (wrapper_type(module, *args)) unless it is in place."""
    forward = module.__dict__.get("forward")
    if not isinstance(forward, wrapper_type):
        forward = wrapper_type(module, *args)
        module.forward = forward
    return forward


def swap_out(module, wrapper_type):
    """Give the module back the forward its `wrapper_type` wrapper replaced (no-op without one)."""
    forward = module.__dict__.get("forward")
    if not isinstance(forward, wrapper_type):
        return
    if forward.replaced is None:
        del module.forward
    else:
        module.forward = forward.replaced
