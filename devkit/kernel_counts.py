"""What an adapted layer costs a training step: the kernels it launches and the autograd nodes it
records, counted on a small linear layer."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from eridiffusion.training.adapters import AdapterSpec


def adapted_layer(cls, dtype, rank=4, alpha=2.0):
    torch.manual_seed(0)
    layer = cls(37, 53)
    torch.nn.init.normal_(layer.weight, std=0.2)
    torch.nn.init.normal_(layer.bias)
    layer = layer.to(dtype).requires_grad_(False)
    adapter = AdapterSpec(rank=rank, alpha=alpha).build(layer, seed=0)
    torch.nn.init.normal_(adapter.lycoris.lora_up.weight, std=0.2)  # a trained, nonzero up
    return layer, adapter


class KernelCounter(TorchDispatchMode):
    """Counts the aten ops that launch work (views and other metadata-only ops left out)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func.overloadpacket not in NO_KERNEL:
            self.count += 1
        return func(*args, **(kwargs or {}))


def cost_of_a_step(layer, dtype, adapter=None):
    """(kernels, autograd nodes) of one forward and backward of `layer` (fresh gradients)."""
    x = torch.randn(2, 5, 37, dtype=dtype, requires_grad=True)
    if adapter is not None:
        adapter.zero_grad(set_to_none=True)
    counter = KernelCounter()
    with counter:
        y = layer(x).sum()
        nodes = autograd_nodes(y)
        y.backward()
    return counter.count, nodes


# kernels a LoRA adds to its layer's forward and backward: forward the down product and the up
# product added into the frozen one's output (addmm_); backward the hidden gradient (the scale
# folded into addmm), the adapter's part of the input gradient added into the frozen one's (addmm_),
# and the down and up gradients; with bf16 activations also the casts of the two fp32 adapter
# weights, forward and (their gradients) backward
ADDED_KERNELS = {torch.float32: 6, torch.bfloat16: 10}


# ops that launch nothing: metadata and allocation without a fill
NO_KERNEL = {
    torch.ops.aten.detach,
    torch.ops.aten.t,
    torch.ops.aten.empty,
    torch.ops.aten.new_empty,
    torch.ops.aten.empty_like,
    torch.ops.aten.empty_strided,
}


def autograd_nodes(tensor):
    """The autograd nodes behind `tensor` other than the leaves' AccumulateGrad."""
    seen, todo = set(), [tensor.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo += [next_node for next_node, _ in node.next_functions]
    return sum(type(node).__name__ != "AccumulateGrad" for node in seen)
