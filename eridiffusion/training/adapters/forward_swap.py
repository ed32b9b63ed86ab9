"""Putting a wrapper object in place of a module's forward while ComfyUI has a training clone
patched, and giving back exactly what was there (no forward of the instance's own, or the one some
other code set). Adapters (adapters/attach.py) and gradient checkpointing (checkpointing.py) use it."""


class SwappedForward:
    """Base of the wrappers: `base` is the forward it stands in for."""

    def __init__(self, module):
        self.replaced = module.__dict__.get("forward")  # an instance-level forward to give back
        self.base = module.forward


def _chain(module):
    """The wrappers in the module's forward, outermost first."""
    forward = module.__dict__.get("forward")
    while isinstance(forward, SwappedForward):
        yield forward
        forward = forward.base


def swap_in(module, wrapper_type, *args):
    """The module's `wrapper_type` wrapper, installed (wrapper_type(module, *args), outermost) unless it
    is in place."""
    present = next((w for w in _chain(module) if isinstance(w, wrapper_type)), None)
    if present is not None:
        return present
    forward = wrapper_type(module, *args)
    module.forward = forward
    return forward


def swap_out(module, wrapper_type):
    """Take the module's `wrapper_type` wrapper out of its forward (no-op without one), wherever it sits
    in a chain of wrappers: outermost, the module gets back the forward the wrapper replaced; inside
    another wrapper (gradient checkpointing around block swap), that one calls what it called. So
    injections may come off in any order."""
    outer, forward = None, module.__dict__.get("forward")
    while isinstance(forward, SwappedForward) and not isinstance(forward, wrapper_type):
        outer, forward = forward, forward.base
    if not isinstance(forward, wrapper_type):
        return
    if outer is not None:
        outer.base, outer.replaced = forward.base, forward.replaced
    elif forward.replaced is None:
        del module.forward
    else:
        module.forward = forward.replaced
