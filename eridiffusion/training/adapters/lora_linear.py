"""A LoRA-adapted linear layer as one autograd node.

Without CUDA graphs a training step is paced by the CPU: each adapted layer used to record about
ten autograd nodes (the two casts of the fp32 adapter weights, two products, transposes, reshapes,
the residual add), and the backward pass walked each of them. Here the adapted layer is one
`torch.autograd.Function` whose backward computes every gradient in a few products:

    y  = x·Wᵀ + b + s·(x·Dᵀ)·Uᵀ           (W, b frozen; D = lora_down, U = lora_up, s = scale)
    ∂x = g·W + s·(g·U)·D,   ∂U = s·gᵀ·(x·Dᵀ),   ∂D = s·(g·U)ᵀ·x

`lora_linear` computes the frozen product itself when the layer is a plain linear layer whose
weight is already in the activations' dtype and device (the common case: a model loaded whole);
otherwise the layer's own forward computes x·Wᵀ + b (ComfyUI's weight casting, offloading or
patches then apply as always) and only the adapter's term is fused.
"""

import functools

import torch


@functools.cache
def plain_forwards():
    """Class forwards that compute exactly F.linear(x, W, b) when the module's flags ask for no casting
    and no weight patches (ComfyUI's ops skip their cast path then)."""
    import comfy.ops  # (the host's layers: imported once a layer is looked at, not to read settings)

    return {torch.nn.Linear.forward, comfy.ops.disable_weight_init.Linear.forward}


def computes_its_weights_product(layer):
    """Whether `layer`'s forward is its own weight's linear product (ComfyUI's dtype casting aside):
    a plain linear class forward with no weight or bias patches."""
    if layer is None or type(layer).forward not in plain_forwards():
        return False
    return not any(getattr(layer, flag, None) for flag in ("weight_function", "bias_function"))


def plain_weight_of(layer, x):
    """(W, b) when `layer`'s class forward is exactly F.linear(x, W, b) with tensors usable as they
    are (`x`'s dtype and device, no ComfyUI casting or weight patches), else None."""
    if not computes_its_weights_product(layer) or getattr(layer, "comfy_cast_weights", None):
        return None
    weight, bias = layer.weight, layer.bias
    for t in (weight, bias):
        if t is None:
            continue
        if type(t) not in (torch.nn.Parameter, torch.Tensor) or t.dtype != x.dtype or t.device != x.device:
            return None
    return weight, bias


class _LoRALinear(torch.autograd.Function):
    """y = x·Wᵀ + b + s·(x·Dᵀ)·Uᵀ, with W and b frozen."""

    @staticmethod
    def forward(ctx, x, weight, bias, down, up, scale):
        flat = x.reshape(-1, x.shape[-1])
        down_c, up_c = down.to(x.dtype), up.to(x.dtype)
        hidden = torch.mm(flat, down_c.t())
        # the output is returned whole, never as a view (model code may write into it in place):
        # the products are written into its flat form
        out = x.new_empty((*x.shape[:-1], weight.shape[0]))
        flat_out = out.view(-1, weight.shape[0])
        if bias is None:
            torch.mm(flat, weight.t(), out=flat_out)
        else:
            torch.addmm(bias, flat, weight.t(), out=flat_out)
        flat_out.addmm_(hidden, up_c.t(), alpha=scale)
        ctx.save_for_backward(flat, weight, hidden, down_c, up_c)
        ctx.scale, ctx.input_shape = scale, x.shape
        return out

    @staticmethod
    def backward(ctx, grad):
        flat, weight, hidden, down_c, up_c = ctx.saved_tensors
        grad = grad.reshape(-1, grad.shape[-1])
        grad_hidden = _scaled_mm(grad, up_c, ctx.scale, like=hidden)
        grad_x = torch.mm(grad, weight).addmm_(grad_hidden, down_c) if ctx.needs_input_grad[0] else None
        return _input_shaped(ctx, grad_x), None, None, *_adapter_grads(ctx, grad, grad_hidden, flat, hidden, up_c)


class _LoRATerm(torch.autograd.Function):
    """y = base + s·(x·Dᵀ)·Uᵀ, where `base` is the frozen layer's output computed outside."""

    @staticmethod
    def forward(ctx, x, base, down, up, scale):
        flat = x.reshape(-1, x.shape[-1])
        down_c, up_c = down.to(x.dtype), up.to(base.dtype)
        hidden = torch.mm(flat, down_c.t())
        out = torch.empty_like(base, memory_format=torch.contiguous_format)  # whole, as in _LoRALinear
        flat_base = base.reshape(-1, base.shape[-1])
        torch.addmm(flat_base, hidden.to(base.dtype), up_c.t(), alpha=scale, out=out.view(flat_base.shape))
        ctx.save_for_backward(flat, hidden, down_c, up_c)
        ctx.scale, ctx.input_shape = scale, x.shape
        return out

    @staticmethod
    def backward(ctx, grad):
        flat, hidden, down_c, up_c = ctx.saved_tensors
        grad2 = grad.reshape(-1, grad.shape[-1])
        grad_hidden = _scaled_mm(grad2, up_c, ctx.scale, like=hidden).to(flat.dtype)
        grad_x = torch.mm(grad_hidden, down_c) if ctx.needs_input_grad[0] else None
        return _input_shaped(ctx, grad_x), grad, *_adapter_grads(ctx, grad2, grad_hidden, flat, hidden, up_c)


def _input_shaped(ctx, grad_x):
    return None if grad_x is None else grad_x.view(ctx.input_shape)


def _scaled_mm(a, b, scale, like):
    """scale·(a·b) in one kernel: addmm with beta 0 reads nothing from `like` (any tensor of the
    result's shape), so the scale rides on the product instead of a separate multiplication."""
    return torch.addmm(like, a, b, beta=0, alpha=scale)


def _adapter_grads(ctx, grad, grad_hidden, flat, hidden, up_c):
    """(∂D, ∂U, None for the scale); autograd casts them to the adapter weights' dtype."""
    down_grad = torch.mm(grad_hidden.t(), flat) if ctx.needs_input_grad[-3] else None
    up_grad = None
    if ctx.needs_input_grad[-2]:
        up_grad = _scaled_mm(grad.t(), hidden.to(grad.dtype), ctx.scale, like=up_c)
    return down_grad, up_grad, None


def lora_linear(x, base, down, up, scale):
    """`base(x)` (the frozen linear layer) plus scale·(x·downᵀ)·upᵀ, as one autograd node.
    `base` is the layer's own forward; where it carries the layer (`base.layer`, see
    adapters/attach.py) and plain_weight_of allows, the frozen product is computed here too.
    `down` (rank, in) and `up` (out, rank) may be in another dtype than x (fp32 master weights):
    their gradients come back in theirs."""
    plain = plain_weight_of(getattr(base, "layer", None), x)
    if plain is not None:
        return _LoRALinear.apply(x, plain[0], plain[1], down, up, scale)
    return _LoRATerm.apply(x, base(x), down, up, scale)
