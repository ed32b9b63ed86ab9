"""A micro-batch's forward, loss and backward captured as CUDA graphs (and, while the text
encoder trains, its transformer's forward and backward: graphed_text_encoder.py).

A diffusion model's training step launches thousands of small kernels from Python (every
adapted layer adds a few), so on a fast GPU the CPU, not the GPU, sets the pace. Replaying a
captured graph launches them all at once. One graph per input shape (aspect bucket, prompt
length), all drawing on one memory pool (micro-batches run one after another, so their
activations never live at the same time); the frozen weights must stay where they are, which
`force_full_load` guarantees while nothing else is loaded. When something is (the text encoder
being trained encodes each batch, and ComfyUI may move the model's weights to make room for it),
the weights' addresses are checked before each replay and the graphs captured again if they moved.

Inputs that require grad (the text encoder's live encoding) stay graph inputs that do: the replayed
backward hands their gradients on to the autograd graph that made them.

Some models make a small constant tensor inside their forward and copy it over from CPU memory
(Wan's timestep embedding, LTX-Video's patch coordinates), which a capture refuses; their step is
captured once more with such constants made on the GPU (capture_constants). Python's garbage
collector stays off while a capture runs: freeing an earlier graph then would break it.
"""

import gc
import logging
import os
import traceback

import torch

from ...errors import EriDiffusionError, first_line
from .capture_constants import made_on


class _CallOfBatch(torch.nn.Module):
    """fn as a module whose parameters are the trained adapters (graph inputs); `constants` are the
    batch's plain values (a graph holds them as they were at its capture). A graph's outputs are
    tensors: where fn returns a tuple, its tensors are the outputs and `layout` records where its
    Nones were."""

    def __init__(self, fn, trained, names, constants):
        super().__init__()
        self.trained = trained
        self.fn, self.names, self.constants = fn, names, constants
        self.layout = None  # None: fn returns one tensor

    def forward(self, *tensors):
        out = self.fn({**self.constants, **dict(zip(self.names, tensors))})
        if isinstance(out, torch.Tensor):
            return out
        if not isinstance(out, (tuple, list)) or not all(o is None or isinstance(o, torch.Tensor) for o in out):
            raise RuntimeError(f"a graphed call returns a tensor or a tuple of tensors and None, not {out!r:.80}")
        self.layout = tuple(o is not None for o in out)
        return tuple(o for o in out if o is not None)

    @staticmethod
    def laid_out(outputs, layout):
        """A graph's outputs as fn returned them (Nones back in place)."""
        if layout is None:
            return outputs
        tensors = iter(outputs)
        return tuple(next(tensors) if present else None for present in layout)


# inputs a graph holds as constants, captured once per value (Lumina 2's num_tokens: the text
# length; Wan VACE's vace_strength: a list of floats; a text encoder's dtype)
CONSTANT_TYPES = (bool, int, float, str, type(None), torch.dtype)


def _constant_key(value):
    """A hashable stand-in for a plain value (lists and tuples of plain values too), else None."""
    if isinstance(value, CONSTANT_TYPES):
        return (type(value).__name__, value)
    if isinstance(value, (list, tuple)):
        keys = [_constant_key(v) for v in value]
        return None if any(k is None for k in keys) else (type(value).__name__, tuple(keys))
    return None


class GraphedCall:
    """fn(batch) -> a tensor (the micro-batch's loss), or a tuple of tensors and Nones, replayed from
    a CUDA graph per input shape; `batch` is a dict of named tensors (noisy latent, sigma, target,
    model inputs, ...) and plain values (CONSTANT_TYPES: a graph per value). `trained` is the module
    holding every trained parameter; its gradients accumulate as usual. Values a graph cannot hold
    (lists of tensors, …) raise when `strict`, else the call returns None and the caller runs the
    batch eagerly. So does a capture that fails (the driver, cuBLAS or an op refusing capture): an
    error naming the fix when `strict`, else one warning and no further captures in this run (the
    graphs already captured keep replaying). `frozen` (a module), when given, is the model whose
    weights may move between calls: its graphs are captured again when they do, and after
    MAX_RECAPTURES such moves the batches run eagerly (or, `strict`, stop with the fix); `placed`: its
    parameters whose tensors block swap binds, which move by design (the graphs copy them in)."""

    MAX_RECAPTURES = 3

    def __init__(self, fn, trained, strict, warmup=2, frozen=None, placed=()):
        self.fn, self.trained, self.strict, self.warmup = fn, trained, strict, warmup
        self.graphs = {}
        self.pool = torch.cuda.graph_pool_handle()
        self.capture_failed = None  # the error of a failed capture, after which batches run eagerly
        self.frozen, self.addresses, self.recaptures = frozen, None, 0
        self.frozen_slots = None  # [(a module's _parameters or _buffers, name)] of `frozen`
        self.placed = {id(p) for p in placed}

    def __call__(self, batch):
        constant_keys = {n: _constant_key(v) for n, v in batch.items() if not isinstance(v, torch.Tensor)}
        constants = {n: batch[n] for n, k in constant_keys.items() if k is not None}
        odd = sorted(n for n, k in constant_keys.items() if k is None)
        if odd and self.strict:
            raise EriDiffusionError(
                f"cuda_graphs: this model takes non-tensor inputs ({', '.join(odd)}), which a "
                "CUDA graph cannot hold; set cuda_graphs to auto or off."
            )
        if odd:
            return None
        if self.frozen is not None and not self._weights_in_place():
            return None
        names = tuple(sorted(n for n in batch if n not in constants))
        args = tuple(batch[n] for n in names)
        key = (names, tuple(sorted((n, constant_keys[n]) for n in constants))) + tuple(
            (tuple(a.shape), a.dtype, a.requires_grad) for a in args
        )
        if key not in self.graphs:
            if self.capture_failed is not None:
                return None
            module = _CallOfBatch(self.fn, self.trained, names, constants)
            sample = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)
            try:
                self.graphs[key] = (self._captured(module, sample), module.layout)
            except RuntimeError as error:  # torch.AcceleratorError too
                return self._capture_failed(error)
        graphed, layout = self.graphs[key]
        return _CallOfBatch.laid_out(graphed(*args), layout)

    def drop(self):
        """Forget every graph (the next calls capture them again, in a new pool) and give their memory
        back to the device."""
        self.graphs, self.addresses = {}, None
        release_graph_memory()
        self.pool = torch.cuda.graph_pool_handle()
        torch.cuda.empty_cache()

    # what CUDA answers a capture that copies a pageable CPU tensor to the device
    CPU_COPY_REFUSED = "Cannot copy between CPU and CUDA tensors during CUDA graph capture"

    def _captured(self, module, sample):
        """`module` graphed; where the capture fails on a constant the forward copies over from CPU
        memory, captured again with such constants made on the current CUDA device."""

        def capture():
            return torch.cuda.make_graphed_callables(
                module, sample, num_warmup_iters=self.warmup, allow_unused_input=True, pool=self.pool
            )

        # the young garbage only: a full collection walks all of ComfyUI's objects (0.4 s in an SDXL
        # run's first step); an earlier run's graphs went when it ended (release_graph_memory)
        gc.collect(1)
        gc.disable()
        try:
            try:
                return capture()
            except RuntimeError as error:
                if self.CPU_COPY_REFUSED not in str(_breaking(error)):
                    raise
            torch.cuda.synchronize()
            # the failed capture's tensors may outlive it (the collector is off), and PyTorch refuses
            # a capture into a pool that its last graph has released but not emptied: a new pool
            self.pool = torch.cuda.graph_pool_handle()
            with made_on(torch.device("cuda", torch.cuda.current_device())) as pinned:
                graphed = capture()
            module.pinned_constants = pinned  # the graph's copies read them on every replay
            return graphed
        finally:
            gc.enable()

    def _weights_in_place(self):
        """Whether the graphs may replay: the frozen weights are where they were at capture (else
        the graphs are dropped, to be captured again), and they have not moved too often."""
        if self.recaptures > self.MAX_RECAPTURES:
            return False
        if self.frozen_slots is None:
            # where each weight sits, read afresh each call: ComfyUI may swap a Parameter object,
            # and walking the module tree every call cost a graphed SDXL step 15 ms
            modules = list(self.frozen.modules())
            self.frozen_slots = [
                (m._parameters, n) for m in modules for n, p in m._parameters.items() if id(p) not in self.placed
            ]
            self.frozen_slots += [(m._buffers, n) for m in modules for n in m._buffers]
        addresses = tuple(t.data_ptr() for t in (slots[name] for slots, name in self.frozen_slots) if t is not None)
        if self.addresses is not None and addresses != self.addresses and self.graphs:
            # a new pool: PyTorch refuses a capture into one whose graphs are all released but whose
            # memory is not yet given back (an allocator assert, the GPU suite, 2026-11-29)
            self.graphs, self.recaptures = {}, self.recaptures + 1
            self.pool = torch.cuda.graph_pool_handle()
        self.addresses = addresses
        if self.recaptures > self.MAX_RECAPTURES:
            self._capture_failed(
                RuntimeError(
                    f"the model's weights moved in memory {self.recaptures} times: ComfyUI offloads it to "
                    "load the text encoder, with too little free VRAM for both"
                )
            )
            return False
        return True

    def _capture_failed(self, error):
        """After a failed capture: the error named (strict), or None (run eagerly) with one warning.
        A sticky CUDA error (the device context itself is broken) surfaces at the synchronize."""
        torch.cuda.synchronize()
        reason = _reason(error)
        if self.strict:
            raise EriDiffusionError(
                f"cuda_graphs: capturing the training step as a CUDA graph failed ({reason}). Set "
                "cuda_graphs to auto (the run then continues without graphs) or off."
            ) from error
        logging.warning(
            f"EriDiffusion: capturing the training step as a CUDA graph failed ({reason}); this run "
            "continues without CUDA graphs, slower. Set cuda_graphs to off to skip the attempt."
        )
        self.capture_failed = error
        return None


def release_graph_memory():
    """Give back the memory of graphs no longer used. torch keeps a cuBLAS workspace per stream, and
    one made while a graph was captured came from that graph's private memory pool: it kept the pool,
    and all the graph's memory with it, allocated after the graph was gone (on an H100, 0.3 to 0.9
    GiB more after each run that trained a text encoder with graphs). The workspaces are made again
    when next needed."""
    if not torch.cuda.is_initialized():
        return
    gc.collect()  # (graphs in reference cycles go now)
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()


def _breaking(error):
    """The error that broke a capture: CUDA ends a capture that an op broke with an error of its
    own ("a previous error during capture"), raised while the op's is handled."""
    while "previous error during capture" in str(error) and error.__context__ is not None:
        error = error.__context__
    return error


def _reason(error):
    """What broke a capture, and where."""
    error = _breaking(error)
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return first_line(error)
    path = frames[-1].filename.replace(os.sep, "/")
    return f"{first_line(error)}, at {'/'.join(path.split('/')[-2:])} line {frames[-1].lineno}"
