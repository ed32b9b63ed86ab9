"""One block's placed weights for block swap (block_swap.py): the frozen parameters of the modules it
may place, laid out in one byte buffer, bound in turn to their host copy, a ring slot or a device copy."""

import torch

ALIGN = 256  # each tensor's offset in a block's buffer: the alignment CUDA kernels expect


def _aligned(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _plain(tensor):
    return type(tensor) in (torch.Tensor, torch.nn.Parameter)


def swappable_modules(block, patches, names, trained_ids):
    """The modules of `block` whose weights block swap may place: every tensor a plain tensor, none
    trained, none with a weight patch of ComfyUI's (a LoRA loaded on the MODEL: ComfyUI applies it
    when it loads, so such a module stays ComfyUI's to load)."""
    chosen = []
    for module in block.modules():
        tensors = [(n, t) for n, t in (*module._parameters.items(), *module._buffers.items()) if t is not None]
        if not tensors:
            continue
        if any(not _plain(t) or id(t) in trained_ids for _, t in tensors):
            continue
        prefix = names.get(id(module), "")
        if any(f"{prefix}.{n}" in patches for n, _ in module._parameters.items()):
            continue
        chosen.append(module)
    return chosen


class PlacedBlock:
    """One block's placed weights: the frozen parameters of its swappable modules, laid out in one
    byte buffer (`nbytes`), bound in turn to the host copy, a ring slot or the device copy."""

    def __init__(self, position, module, modules):
        self.position, self.module, self.modules = position, module, modules
        self.layout = []  # (module, name, offset, dtype, shape)
        offset = 0
        for m in modules:
            for name, param in m._parameters.items():
                if param is None:
                    continue
                self.layout.append((m, name, offset, param.dtype, param.shape))
                offset = _aligned(offset + param.numel() * param.element_size())
        self.nbytes = offset
        self.host: torch.Tensor | None = None  # a ring block's weights in host memory
        self.device_copy: torch.Tensor | None = None  # a held block's weights on the device
        self.slot: int | None = None
        self.computed_over = 0  # the positions (tokens, pixels) of its input in the first step, 0: unseen
        self.views: dict[object, list[torch.Tensor]] = {}  # "host", "device" or a slot: the tensors bound

    def parameters(self):
        return [m._parameters[name] for m, name, *_ in self.layout]

    def views_of(self, where, buffer):
        if where not in self.views:
            self.views[where] = [
                buffer[o : o + dtype.itemsize * shape.numel()].view(dtype).view(shape)
                for _, _, o, dtype, shape in self.layout
            ]
        return self.views[where]

    def copy_into(self, buffer):
        """Write the weights the parameters now hold into `buffer` (this block's layout)."""
        for (_, _, offset, dtype, shape), param in zip(self.layout, self.parameters()):
            n = dtype.itemsize * shape.numel()
            buffer[offset : offset + n].view(dtype).view(shape).copy_(param.detach(), non_blocking=True)
        return buffer
