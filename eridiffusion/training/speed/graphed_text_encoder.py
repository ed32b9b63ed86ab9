"""The trained text encoders' transformers replayed from CUDA graphs (cuda_graphs on or auto).

With the text encoder trained, every micro-batch encodes its captions with gradients; eagerly,
CLIP-L and CLIP-G's forward and backward with their adapters cost SDXL three times its graphed
UNet step. Here ComfyUI's encode path runs as always (tokens to embeddings, prompt weights, the
pooled output), and only each transformer's forward and backward replay from a graph: one per
input shape and settings (cuda_graphs.GraphedCall; CLIP's settings include the caption's length in
tokens, by which it picks the pooled token), and one per encoding of a micro-batch, because
a graph's outputs and saved activations are overwritten by its next replay, so each encoding of a
micro-batch needs its own until the micro-batch's backward has run.
"""

import contextlib

import comfy.sd1_clip
import torch

from ..adapters.forward_swap import SwappedForward, swap_in, swap_out
from .cuda_graphs import GraphedCall

# the batch entry that numbers the encodings of a micro-batch (a plain value: a graph per number)
ENCODING = "eridiffusion_encoding"
POSITIONAL = "*"  # batch entries "*0", "*1", …: the positional arguments (no keyword is named so)


class _GraphedTransformer(SwappedForward):
    """Stands in for a transformer's forward while captions are encoded for training."""

    def __init__(self, module, encoders, graphed):
        super().__init__(module)
        self.encoders, self.graphed = encoders, graphed

    def __call__(self, *args, **kwargs):
        if not torch.is_grad_enabled():  # evaluation, validation: no backward to replay
            return self.base(*args, **kwargs)
        batch = {f"{POSITIONAL}{i}": value for i, value in enumerate(args)}
        batch.update(kwargs)
        batch[ENCODING] = self.encoders.encodings
        self.encoders.encodings += 1
        out = self.graphed(batch)
        return self.base(*args, **kwargs) if out is None else out


def _transformer_call(transformer, batch):
    """The transformer's own forward on a batch as _GraphedTransformer makes it."""
    count = sum(name.startswith(POSITIONAL) for name in batch)
    args = [batch[f"{POSITIONAL}{i}"] for i in range(count)]
    kwargs = {name: value for name, value in batch.items() if name != ENCODING and not name.startswith(POSITIONAL)}
    return transformer.forward.base(*args, **kwargs)


class GraphedEncoders:
    """CUDA graphs of the transformers of `cond_stage_model`'s text encoders (ComfyUI's SDClipModel
    and its subclasses) that carry adapters of `adapters` (an AdapterSet of layers named as in
    `cond_stage_model`). `strict`: a capture that fails raises (cuda_graphs on), else that encoder
    runs eagerly from then on, with one warning (auto)."""

    def __init__(self, cond_stage_model, adapters, strict):
        self.encodings = 0
        self.transformers = []
        trained = dict(adapters.items())
        for name, encoder in cond_stage_model.named_modules():
            if not isinstance(encoder, comfy.sd1_clip.SDClipModel):
                continue
            prefix = f"{name}.transformer." if name else "transformer."
            own = torch.nn.ModuleList([a for n, a in trained.items() if n.startswith(prefix)])
            if len(own):
                transformer = encoder.transformer
                graphed = GraphedCall(
                    lambda batch, t=transformer: _transformer_call(t, batch), own, strict, frozen=transformer
                )
                self.transformers.append((transformer, graphed))

    def micro_batch_starts(self):
        """The previous micro-batch's backward has run: its encodings' graphs may replay again."""
        self.encodings = 0

    @contextlib.contextmanager
    def active(self):
        """Encoding in the block goes through the graphs; afterwards the transformers are as before."""
        for transformer, graphed in self.transformers:
            swap_in(transformer, _GraphedTransformer, self, graphed)
        try:
            yield
        finally:
            for transformer, _ in self.transformers:
                swap_out(transformer, _GraphedTransformer)
