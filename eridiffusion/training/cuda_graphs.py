"""A micro-batch's forward, loss and backward captured as CUDA graphs.

A diffusion model's training step launches thousands of small kernels from Python (every
adapted layer adds a few), so on a fast GPU the CPU, not the GPU, sets the pace. Replaying a
captured graph launches them all at once. One graph per input shape (aspect bucket, prompt
length), all drawing on one memory pool (micro-batches run one after another, so their
activations never live at the same time); the frozen weights must stay where they are, which
`force_full_load` guarantees.
"""

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
    batch eagerly."""

    def __init__(self, loss_fn, trained, strict, warmup=3):
        self.loss_fn, self.trained, self.strict, self.warmup = loss_fn, trained, strict, warmup
        self.graphs = {}
        self.pool = torch.cuda.graph_pool_handle()

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
            module = _LossOfBatch(self.loss_fn, self.trained, names)
            sample = tuple(a.detach().clone() for a in args)
            self.graphs[key] = torch.cuda.make_graphed_callables(
                module, sample, num_warmup_iters=self.warmup, allow_unused_input=True, pool=self.pool
            )
        return self.graphs[key](*args)
