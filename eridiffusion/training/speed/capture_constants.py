"""Constant tensors a model makes inside its forward, made the way a CUDA-graph capture allows.

Some of ComfyUI's models build small constants on every call: `torch.arange(half)` on the CPU,
then `.to(x.device)` (Wan's timestep embedding), or `torch.tensor(self._patch_size, device=...)`
(LTX-Video's patch coordinates), or index a GPU tensor with Python lists (CLIP's pooled output:
`x[list(range(batch)), last_token_positions]`), or compute a table with numpy and move it over
(Hunyuan-DiT's RoPE: `torch.from_numpy(pos).to(device)`). Each copies from pageable CPU memory to
the GPU, which a capture refuses. Under `made_on(device)` a factory call that names no device makes
its tensor on `device` (torch.device's own context), a tensor of a few Python numbers meant for the
GPU (a list index of a GPU tensor too) is filled in there by kernels that carry its values, and a
CPU tensor moved to the GPU during the capture is first copied into pinned memory, which the graph
then copies from on every replay (the mode keeps those buffers: they live as long as the graph). Either way the graph
holds the constant as the forward made it at capture: such values come from shapes and settings,
never from the GPU's data, which a capture could not read.
"""

import contextlib

import torch
from torch.overrides import TorchFunctionMode

# larger constants keep their copy (and the capture its error, which names the op)
MAX_FILLED = 256


class _FilledOnDevice(TorchFunctionMode):
    """torch.tensor / torch.as_tensor of Python data for a CUDA device (or for none: `device`), and
    lists of ints indexing a CUDA tensor, made by fill kernels instead of a copy from CPU memory."""

    def __init__(self, device):
        super().__init__()
        self.device = device
        self.pinned = []  # the pinned copies of CPU tensors moved to the GPU (a graph copies from them)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        capturing = torch.cuda.is_current_stream_capturing()  # (a warm-up's copies stay as they are)
        if capturing and func in (torch.Tensor.to, torch.Tensor.cuda) and args[0].device.type == "cpu":
            target = _target_device(func, args[1:], kwargs)
            if target is not None and target.type == "cuda":
                pinned = args[0].pin_memory()
                self.pinned.append(pinned)  # kept unchanged: the copy may read it after the call returns
                return func(pinned, *args[1:], **{**kwargs, "non_blocking": True})
        if func in (torch.tensor, torch.as_tensor) and args and not isinstance(args[0], torch.Tensor):
            device = torch.device(kwargs.get("device") or self.device)
            if device.type == "cuda":
                values = func(*args, **{**kwargs, "device": "cpu"})
                if values.numel() <= MAX_FILLED:
                    return _filled(values, device).requires_grad_(bool(kwargs.get("requires_grad")))
        if func is torch.Tensor.__getitem__ and args[0].device.type == "cuda":
            index = args[1]
            parts = index if isinstance(index, tuple) else (index,)
            filled = tuple(_filled_index(p, args[0].device) for p in parts)
            return func(args[0], filled if isinstance(index, tuple) else filled[0])
        return func(*args, **kwargs)


def _target_device(func, args, kwargs):
    """The device a `Tensor.to(...)` / `Tensor.cuda(...)` call moves to (None: it moves nowhere)."""
    if func is torch.Tensor.cuda:
        device = args[0] if args else kwargs.get("device")
        return torch.device("cuda", device) if isinstance(device, int) else torch.device(device or "cuda")
    for value in (*args, kwargs.get("device")):
        if isinstance(value, torch.Tensor):
            return value.device
        if isinstance(value, (torch.device, str)):
            return torch.device(value)
    return None


def _filled_index(part, device):
    """An index part as the GPU tensor a list of ints stands for; other parts as they are."""
    if isinstance(part, list) and 0 < len(part) <= MAX_FILLED and all(type(v) is int for v in part):
        return _filled(torch.tensor(part, device="cpu"), device)
    return part


def _filled(values, device):
    """`values` (a CPU tensor) rebuilt on `device` from one fill kernel per element."""
    flat = values.reshape(-1).tolist()
    if not flat:
        return torch.empty(values.shape, dtype=values.dtype, device=device)
    parts = [torch.full((1,), v, dtype=values.dtype, device=device) for v in flat]
    return torch.cat(parts).reshape(values.shape)


@contextlib.contextmanager
def made_on(device):
    """Factory calls without a device, and small tensors of Python data, made on `device`; CPU
    tensors moved there through pinned memory. Yields the list of those pinned buffers, which must
    live as long as a graph captured here."""
    mode = _FilledOnDevice(device)
    with torch.device(device), mode:
        yield mode.pinned
