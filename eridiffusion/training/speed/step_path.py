"""How a training step computes its micro-batches' losses and gradients: the one interface the
training loop calls, behind which the speed paths plug in (CUDA graphs of the step and of the
trained text encoders, compute copies of the adapters' weights with their shared-input groups, fp8
products of the frozen layers, the fused RoPE). The loop never branches on them; each path
computes what the plain eager one computes. What is trained reaches them as trained/'s Trained."""

import contextlib
import logging

import torch

from ...comfy_compat import training_forward
from ...errors import EriDiffusionError
from ..adapters import AdapterSet
from ..trained import Trained
from .compute_copies import ComputeCopies
from .cuda_graphs import GraphedCall
from .fused_rope import fused_flux_rope
from .graphed_sampling import graphed_sampling
from .graphed_text_encoder import GraphedEncoders


class StepPath:
    """`loss_of(batch)`: a micro-batch's loss, eagerly; `graphed`: the same replayed from CUDA
    graphs (a GraphedCall, which answers None for a batch it cannot replay); `copies`: the
    ComputeCopies the adapted layers compute with; `fp8_products`: the frozen layers' fp8 products
    (under `adapters`, the AdapterSet trained, or None where no adapter is)."""

    def __init__(
        self, adapters, loss_of, graphed=None, copies=None, fp8_products=None, fused_rope=True, trained_tensors=()
    ):
        self.adapters, self.loss_of, self.graphed = adapters, loss_of, graphed
        self.copies, self.fp8_products, self.fused_rope = copies, fp8_products, fused_rope
        self.trained_tensors = trained_tensors  # (every trained tensor, the text encoder's too: _own_gradients)
        self.steps_taken = 0

    @contextlib.contextmanager
    def step(self):
        """One optimizer step's forwards and backwards run inside: ComfyUI's training switch, the
        fused RoPE, the fp8 products and the step's compute copies of the adapters' weights."""
        copies = self.copies.in_use() if self.copies is not None else contextlib.nullcontext()
        adapters = self.adapters
        products = adapters.frozen_products(self.fp8_products) if adapters is not None else contextlib.nullcontext()
        with training_forward(), fused_flux_rope(self.fused_rope), products, copies:
            yield
        self.steps_taken += 1
        if self.steps_taken == 1 and self.fp8_products is not None:
            in_fp8, seen = self.fp8_products.layers_in_fp8()
            logging.info(
                f"EriDiffusion: fp8_compute: {in_fp8} of the {seen} adapted layers compute their frozen product in "
                "fp8 (the others are convolutions, streamed, patched, or too small for fp8 to gain)."
            )

    def loss(self, batch):
        """The micro-batch's loss: replayed from a CUDA graph where there is one, else eagerly."""
        loss = self.graphed(batch) if self.graphed is not None else None
        return loss if loss is not None else self.loss_of(batch)

    def backward(self, loss, scaler, more=False):
        """Backpropagate the (scaled) loss; the compute copies' gradients join the fp32 masters'. `more`:
        another backward follows in this optimizer step (grad_accum, a prior micro-batch)."""
        scaler.scale(loss).backward()
        if self.copies is not None:
            self.copies.fold_gradients()
        if more and self.graphed is not None:
            self._own_gradients()

    def _own_gradients(self):
        """The trained tensors' gradients copied out of the replayed graph: its backward hands each
        gradient over in a static buffer, which autograd keeps as a tensor's .grad without a copy when no
        one else holds it (AccumulateGrad), and the next replay writes over that buffer: the step would
        sum twice the last micro-batch's gradient instead of each one's."""
        held = [p for p in self.trained_tensors if p.grad is not None]
        if held:
            with torch.no_grad():
                for tensor, grad in zip(held, torch._foreach_mul([p.grad for p in held], 1.0)):
                    tensor.grad = grad

    def drop_graphs(self):
        """Let go of the CUDA graphs captured so far (the weights they read are about to move), and of
        their memory; the next steps capture them again."""
        if self.graphed is not None:
            self.graphed.drop()

    def sampling(self, patcher):
        """The context samples of `patcher` render in: where the steps replay from CUDA graphs, the
        sampler's model calls replay from graphs of their own."""
        if self.graphed is None or self.graphed.capture_failed is not None:
            return contextlib.nullcontext()
        return graphed_sampling(patcher)

    def release(self):
        """Let go of what only training used (CUDA graphs, fp8 weights)."""
        self.graphed = None
        if self.fp8_products is not None:
            self.fp8_products.clear()


def graphs_wanted(config, device):
    """Whether the steps replay from CUDA graphs (config.cuda_graphs; check_graphs_can_run passed). Block
    swap's copies replay inside them; ComfyUI's partial loading (weights_vram_gib) cannot."""
    setting = config.cuda_graphs
    streamed = config.weights_vram_gib > 0
    quantized = config.base_quantization != "none"  # (bitsandbytes' kernels not yet measured in a capture)
    sharded = config.precision.sharding != "none"  # (FSDP's gathers run from hooks: check_sharding)
    eager = streamed or quantized or sharded or config.fused_backward  # (fused: the updates run inside the backward)
    return setting == "on" or (setting == "auto" and device.type == "cuda" and not eager)


def check_graphs_can_run(config, device):
    """cuda_graphs on where they cannot replay: weights streamed by ComfyUI's partial loading, or no CUDA
    device."""
    if config.cuda_graphs != "on":
        return
    if config.weights_vram_gib > 0:
        raise EriDiffusionError(
            "cuda_graphs cannot replay weights streamed from CPU memory (weights_vram_gib > 0): "
            "set cuda_graphs to auto or off, or weights_vram_gib to 0."
        )
    if config.base_quantization != "none":
        raise EriDiffusionError(
            f"cuda_graphs on with base_quantization {config.base_quantization}: the quantized base runs eagerly "
            "for now; set cuda_graphs to auto or off (or base_quantization to none)."
        )
    if device.type != "cuda":
        raise EriDiffusionError(
            f"cuda_graphs needs a CUDA device; this model trains on {device}. Turn cuda_graphs off."
        )


def compute_copies(adapters, config, graphed):
    """ComputeCopies of the adapters when the step computes in a lower precision than the adapters'
    fp32, else None; a step replayed from CUDA graphs (`graphed`) has no shared-input groups."""
    dtype = config.torch_dtype
    if not config.speed.compute_copies or dtype == torch.float32 or not ComputeCopies.worth_it(adapters, dtype):
        return None
    return ComputeCopies(adapters, dtype, share_inputs=not graphed)


def step_path(
    config, device, trained: Trained, loss_of, frozen_model=None, fp8_products=None, block_swap=None
) -> StepPath:
    """The StepPath of a run training `trained`. With CUDA graphs and the text encoder trained, its
    encoding is a graph input that requires grad, the model's weight addresses (`frozen_model`) are
    checked before each replay (loading the text encoder could move them; those `block_swap` places
    move by design, and its copies are in the graphs), and the encoders' transformers replay from
    graphs of their own. With ComputeCopies, the graphs take the copies the layers compute with as
    trained inputs too."""
    adapters: AdapterSet | None = trained.adapter_set()
    if fp8_products is not None and adapters is None:
        raise EriDiffusionError(
            "fp8_compute computes the frozen layers under adapters, and this run trains none: turn fp8_compute off."
        )
    graphed = graphs_wanted(config, device)
    copies = compute_copies(adapters, config, graphed) if adapters is not None else None
    call = None
    if graphed:
        strict = config.cuda_graphs == "on"
        frozen, text_encoder = None, trained.text_encoder
        if text_encoder is not None:
            frozen = frozen_model
            text_encoder.graphed = GraphedEncoders(text_encoder.clip.cond_stage_model, text_encoder.adapters, strict)
        inputs = trained.model_part()
        if copies is not None:  # the layers compute with the copies: their gradients come out of the graph
            inputs = torch.nn.ModuleList([inputs, copies.graphed_parameters()])
        placed = block_swap.placed_parameters() if block_swap is not None else ()
        call = GraphedCall(loss_of, inputs, strict, frozen=frozen, placed=placed)
        if block_swap is not None:
            block_swap.graphed = True
    fused_rope, tensors = config.speed.fused_rope, trained.parameters()
    return StepPath(adapters, loss_of, call, copies, fp8_products, fused_rope=fused_rope, trained_tensors=tensors)
