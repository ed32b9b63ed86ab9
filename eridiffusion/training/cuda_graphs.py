"""A micro-batch's forward, loss and backward captured as CUDA graphs.

A diffusion model's training step launches thousands of small kernels from Python (every
adapted layer adds a few), so on a fast GPU the CPU, not the GPU, sets the pace. Replaying a
captured graph launches them all at once. One graph per input shape (aspect bucket, prompt
length), all drawing on one memory pool (micro-batches run one after another, so their
activations never live at the same time); the frozen weights must stay where they are, which
`force_full_load` guarantees.
"""

import logging

import torch

from .errors import EriDiffusionError


class _LossOfBatch(torch.nn.Module):
    """loss_fn as a module whose parameters are the trained adapters (graph inputs)."""

    def __init__(self, loss_fn, trained, names):
        super().__init__()
        self.trained = trained
        self.loss_fn, self.names = loss_fn, names

    def forward(self, *tensors):
        return self.loss_fn(dict(zip(self.names, tensors)))


class GraphedLoss:
    """loss_fn(batch) -> scalar loss, replayed from a CUDA graph per input shape; `batch` is a dict
    of named tensors (noisy latent, sigma, target, model inputs, ...). `trained` is the module
    holding every trained parameter; its gradients accumulate as usual. Values a graph cannot hold
    (lists of tensors, …) raise when `strict`, else the call returns None and the caller runs the
    batch eagerly. So does a capture that fails (the driver, cuBLAS or an op refusing capture): an
    error naming the fix when `strict`, else one warning and no further captures in this run (the
    graphs already captured keep replaying)."""

    def __init__(self, loss_fn, trained, strict, warmup=3):
        self.loss_fn, self.trained, self.strict, self.warmup = loss_fn, trained, strict, warmup
        self.graphs = {}
        self.pool = torch.cuda.graph_pool_handle()
        self.capture_failed = None  # the error of a failed capture, after which batches run eagerly

    def __call__(self, batch):
        odd = sorted(name for name, value in batch.items() if not isinstance(value, torch.Tensor))
        if odd and self.strict:
            raise EriDiffusionError(
                f"cuda_graphs: this model takes non-tensor inputs ({', '.join(odd)}), which a "
                "CUDA graph cannot hold; set cuda_graphs to auto or off."
            )
        if odd:
            return None
        names = tuple(sorted(batch))
        args = tuple(batch[n] for n in names)
        key = (names,) + tuple((tuple(a.shape), a.dtype) for a in args)
        if key not in self.graphs:
            if self.capture_failed is not None:
                return None
            module = _LossOfBatch(self.loss_fn, self.trained, names)
            sample = tuple(a.detach().clone() for a in args)
            try:
                self.graphs[key] = torch.cuda.make_graphed_callables(
                    module, sample, num_warmup_iters=self.warmup, allow_unused_input=True, pool=self.pool
                )
            except RuntimeError as error:  # torch.AcceleratorError too
                return self._capture_failed(error)
        return self.graphs[key](*args)

    def _capture_failed(self, error):
        """After a failed capture: the error named (strict), or None (run eagerly) with one warning.
        A sticky CUDA error (the device context itself is broken) surfaces at the synchronize."""
        torch.cuda.synchronize()
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if self.strict:
            raise EriDiffusionError(
                f"cuda_graphs: capturing the training step as a CUDA graph failed ({first_line}). Set "
                "cuda_graphs to auto (the run then continues without graphs) or off."
            ) from error
        logging.warning(
            f"EriDiffusion: capturing the training step as a CUDA graph failed ({first_line}); this run "
            "continues without CUDA graphs, slower. Set cuda_graphs to off to skip the attempt."
        )
        self.capture_failed = error
        return None
