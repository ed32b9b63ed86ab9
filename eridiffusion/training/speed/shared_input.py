"""LoRA layers that take one input tensor one after another (an attention block's q, k and v
projections) computed as one autograd node, with one down-projection for all of them.

Without CUDA graphs a training step is paced by the CPU's work per adapted layer (see
lora_linear.py). Layers called in a row with the same input do not need a node each: their down
matrices, laid out as one (Σ rank, in) matrix, make every hidden activation in one product, one
product makes the down gradients and one the input gradient's adapter part, and the input gradient
is summed in place instead of by autograd. SDXL's self-attention (q, k, v) goes from 3 nodes and
26 kernels to 1 node and 18, its cross-attention's k and v (on the text) from 2 nodes and 12
kernels to 1 and 10.

Which layers share an input is learned from one training step (`CallRecorder`), not from names:
the first layer of a group (its leader) computes every member's output and holds the others' until
they are called with that same tensor, as they were then. A member called with anything else
computes alone, as without the group, and the group is not used again: the result never depends
on the guess.
"""

from collections.abc import Sequence
from typing import Any

import torch

from ..adapters.lora_linear import plain_weight_of


class _SharedInputLoRA(torch.autograd.Function):
    """yᵢ = x·Wᵢᵀ + bᵢ + sᵢ·(x·Dᵢᵀ)·Uᵢᵀ for the members i of a group, with Wᵢ and bᵢ frozen and the
    Dᵢ stacked in `downs` (each Dᵢ is a row block of it: the hidden activations are one product)."""

    @staticmethod
    def forward(ctx, x, downs, scales, *members):
        weights, biases, ups = members[0::4], members[1::4], members[3::4]
        flat = x.reshape(-1, x.shape[-1])
        hidden = torch.mm(flat, downs.t())
        outputs = []
        for weight, bias, up, scale, block in zip(weights, biases, ups, scales, _row_blocks(ups)):
            out = x.new_empty((*x.shape[:-1], weight.shape[0]))  # whole tensors, never views (as lora_linear)
            flat_out = out.view(-1, weight.shape[0])
            if bias is None:
                torch.mm(flat, weight.t(), out=flat_out)
            else:
                torch.addmm(bias, flat, weight.t(), out=flat_out)
            flat_out.addmm_(hidden[:, block], up.t(), alpha=scale)
            outputs.append(out)
        ctx.save_for_backward(flat, hidden, downs, *weights, *ups)
        ctx.scales, ctx.input_shape = scales, x.shape
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads):
        flat, hidden, downs, *rest = ctx.saved_tensors
        weights, ups = rest[: len(ctx.scales)], rest[len(ctx.scales) :]
        flat_grads = [g.reshape(-1, g.shape[-1]) for g in grads]
        grad_hidden = _hidden_gradient(flat_grads, ups, ctx.scales, hidden)
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.mm(flat_grads[0], weights[0])
            for grad, weight in zip(flat_grads[1:], weights[1:]):
                grad_x.addmm_(grad, weight)
            grad_x = grad_x.addmm_(grad_hidden, downs).view(ctx.input_shape)
        member_grads = []
        for down_grad, up_grad in _adapter_gradients(ctx, 3, 4, flat_grads, grad_hidden, flat, hidden, ups):
            member_grads += [None, None, down_grad, up_grad]
        return grad_x, None, None, *member_grads


class _SharedInputLoRATerm(torch.autograd.Function):
    """yᵢ = baseᵢ + sᵢ·(x·Dᵢᵀ)·Uᵢᵀ, where each `baseᵢ` is the frozen layer's output computed by its
    own forward (ComfyUI casting or streaming its weight), and the Dᵢ are stacked in `downs`."""

    @staticmethod
    def forward(ctx, x, downs, scales, *members):
        bases, ups = members[0::3], members[2::3]
        flat = x.reshape(-1, x.shape[-1])
        hidden = torch.mm(flat, downs.t())
        outputs = []
        for base, up, scale, block in zip(bases, ups, scales, _row_blocks(ups)):
            out = torch.empty_like(base, memory_format=torch.contiguous_format)  # whole, as in lora_linear
            flat_base = base.reshape(-1, base.shape[-1])
            torch.addmm(
                flat_base,
                hidden[:, block].to(base.dtype),
                up.to(base.dtype).t(),
                alpha=scale,
                out=out.view(flat_base.shape),
            )
            outputs.append(out)
        ctx.save_for_backward(flat, hidden, downs, *ups)
        ctx.scales, ctx.input_shape = scales, x.shape
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads):
        flat, hidden, downs, *ups = ctx.saved_tensors
        flat_grads = [g.reshape(-1, g.shape[-1]).to(hidden.dtype) for g in grads]
        grad_hidden = _hidden_gradient(flat_grads, ups, ctx.scales, hidden)
        grad_x = torch.mm(grad_hidden, downs).view(ctx.input_shape) if ctx.needs_input_grad[0] else None
        member_grads = []
        adapter_grads = _adapter_gradients(ctx, 3, 3, flat_grads, grad_hidden, flat, hidden, ups)
        for grad, (down_grad, up_grad) in zip(grads, adapter_grads):
            member_grads += [grad, down_grad, up_grad]  # the frozen layer's own gradient flows through its output
        return grad_x, None, None, *member_grads


def _row_blocks(ups):
    """The slice of the stacked hidden activations (and of `downs`' rows) of each member, by its rank."""
    blocks, start = [], 0
    for up in ups:
        blocks.append(slice(start, start + up.shape[1]))
        start += up.shape[1]
    return blocks


def _hidden_gradient(grads, ups, scales, hidden):
    """∂hidden, each member's block sᵢ·gᵢ·Uᵢ written in place (the scale rides on the product)."""
    grad_hidden = torch.empty_like(hidden)
    for grad, up, scale, block in zip(grads, ups, scales, _row_blocks(ups)):
        columns = grad_hidden[:, block]
        torch.addmm(columns, grad, up, beta=0, alpha=scale, out=columns)
    return grad_hidden


def _adapter_gradients(ctx, first, stride, grads, grad_hidden, flat, hidden, ups):
    """[(∂Dᵢ, ∂Uᵢ)] of the members, whose tensors are `stride` inputs apart from input `first`, the
    last two being Dᵢ and Uᵢ: ∂D of all members is one product, each ∂Dᵢ a row block of it."""
    grad_downs = torch.mm(grad_hidden.t(), flat)
    result = []
    for i, (grad, up, scale, block) in enumerate(zip(grads, ups, ctx.scales, _row_blocks(ups))):
        needs_down, needs_up = ctx.needs_input_grad[first + stride * i + stride - 2 : first + stride * (i + 1)]
        up_grad = torch.addmm(up, grad.t(), hidden[:, block], beta=0, alpha=scale) if needs_up else None
        result.append((grad_downs[block] if needs_down else None, up_grad))
    return result


class SharedInputGroup:
    """LoRAs whose layers are called in a row with one input tensor, computed together.

    `members` are (adapter, layer) in call order; `downs` is the (Σ rank, in) matrix whose row
    blocks are the members' down weights in the compute dtype (compute_copies.ComputeCopies lays
    them out so)."""

    def __init__(self, members, downs):
        self.members = members
        self.leader = members[0][0]
        self.downs = downs
        self.pending = None  # (input, its version, {adapter: output}) between the leader and the rest
        # a member was called with another input: the group is dropped when the step ends (not at
        # once, so that a checkpointed block recomputes as it first ran)
        self.missed = False

    def output(self, adapter, x, base):
        """`adapter`'s adapted output when the group computes it, else None (compute it alone)."""
        if adapter is self.leader:
            self.pending = None
            return self._outputs(x, base)
        pending = self.pending
        if pending is not None and pending[0] is x and pending[1] == x._version:
            layer, out = pending[2].pop(adapter, (None, None))
            if not pending[2]:
                self.pending = None  # let go of the input: gradient checkpointing frees it
            if out is not None and getattr(base, "layer", None) is layer:
                return out
        self.missed = True
        return None

    def _outputs(self, x, base):
        """The leader's output, the others' held in `pending`; None when a member cannot be grouped
        this time (bypassed, fp8 products, another adapter on its layer)."""
        if getattr(base, "layer", None) is not self.members[0][1]:
            return None
        forwards, plains, scales = [], [], []
        for adapter, layer in self.members:
            forward = _layer_forward_of(layer, adapter)
            weights = adapter.compute_weights
            if (
                forward is None
                or weights is None
                or weights[0].dtype != x.dtype
                or adapter.multiplier == 0
                or adapter.frozen_products is not None
            ):
                return None
            forwards.append(forward)
            plains.append(plain_weight_of(layer, x))
            scales.append(adapter.lycoris.scale * adapter.multiplier)
        tensors = []
        if all(plain is not None for plain in plains):
            for (adapter, _), plain in zip(self.members, plains):
                tensors += [*plain, *adapter.compute_weights]
            outputs = _SharedInputLoRA.apply(x, self.downs, tuple(scales), *tensors)
        else:  # the layers' own forwards compute the frozen products (ComfyUI casts the weights)
            for (adapter, _), forward in zip(self.members, forwards):
                tensors += [forward(x), *adapter.compute_weights]
            outputs = _SharedInputLoRATerm.apply(x, self.downs, tuple(scales), *tensors)
        self.pending = (
            x,
            x._version,
            {adapter: (layer, out) for (adapter, layer), out in zip(self.members[1:], outputs[1:])},
        )
        return outputs[0]


def _layer_forward_of(layer, adapter):
    """The forward of `layer` under its adapter bypass (attach._BypassForward), when `adapter` is its
    only adapter and the layer's own class forward is beneath it; else None."""
    bypass = layer.__dict__.get("forward")
    adapters: Sequence[Any] = getattr(bypass, "adapters", ())
    forward = getattr(bypass, "layer_forward", None)
    if len(adapters) != 1 or adapters[0] is not adapter or getattr(forward, "layer", None) is not layer:
        return None
    return forward


class CallRecorder:
    """Stands in for the groups during one training step: notes which adapted layers are called in a
    row with one input tensor (recomputations in the backward pass, from gradient checkpointing,
    are not looked at)."""

    def __init__(self):
        # [(input, its version, [(adapter, layer)])], in call order; (None, None, ...) once let go of
        self.runs: list[tuple[Any, int | None, list[tuple[Any, Any]]]] = []

    def output(self, adapter, x, base):
        if _in_backward():
            return None
        layer = getattr(base, "layer", None)
        last = self.runs[-1] if self.runs else None
        if last is not None and last[0] is x and last[1] == x._version and layer is not None:
            last[2].append((adapter, layer))
        else:
            if last is not None:
                self.runs[-1] = (None, None, last[2])  # let go of the input
            self.runs.append((x if layer is not None else None, x._version, [(adapter, layer)]))
        return None

    def groups(self):
        """[[(adapter, layer)]]: the runs of two or more layers that every call of their adapters agrees on."""
        runs = [tuple(run) for _, _, run in self.runs]
        self.runs = []
        seen: dict[int, set[tuple[Any, ...]]] = {}  # {id(adapter): the runs it was called in}
        for run in runs:
            for adapter, _ in run:
                seen.setdefault(id(adapter), set()).add(run)
        agreed = []
        for run in dict.fromkeys(runs):
            adapters = {id(adapter) for adapter, _ in run}
            if len(run) > 1 and len(adapters) == len(run) and all(seen[a] == {run} for a in adapters):
                agreed.append(list(run))
        return agreed


def _in_backward():
    """Whether this runs inside autograd's backward pass (a checkpointed block recomputed)."""
    return torch._C._current_graph_task_id() != -1
