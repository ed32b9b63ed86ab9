"""The LoRA weights in the model's compute dtype, cast once per optimizer step instead of in every layer.

The adapters' master weights are fp32 and the model computes in bf16 (or fp16), so each adapted layer
cast its two weights forward and autograd cast their two gradients back: 4 of the 10 kernels a LoRA
adds to a layer, and more of the CPU's work per layer, which paces a step without CUDA graphs. Here
the weights are cast in one multi-tensor copy when a step starts, the layers compute with those
copies, and after each backward pass the copies' gradients are added to the masters' in one more.
The result is the one the per-layer casts give: each layer's gradient is computed in the compute
dtype either way, and summed over micro-batches in fp32."""

import contextlib

import torch


def _linear_lora_weights(adapter_set):
    """(adapter, [down, up]) of each linear LoRA of `adapter_set` (other adapters have no linear_weights)."""
    for _, adapter in adapter_set.items():
        weights = getattr(adapter, "linear_weights", lambda: None)()
        if weights is not None:
            yield adapter, weights


class ComputeCopies:
    """Compute-dtype copies of the linear LoRA adapters' weights of an AdapterSet."""

    def __init__(self, adapter_set, dtype):
        self.adapters, self.masters = [], []
        for adapter, weights in _linear_lora_weights(adapter_set):
            self.adapters.append(adapter)
            self.masters += weights
        with torch.inference_mode(False):  # the copies are autograd leaves; a node may run this in inference mode
            self.copies = [torch.empty_like(m, dtype=dtype).requires_grad_(True) for m in self.masters]
            # the masters' gradients live here from step to step (the optimizer's zero_grad lets go of them)
            self.gradients = [torch.empty_like(m) for m in self.masters]

    @staticmethod
    def worth_it(adapter_set, dtype):
        """Whether copies would save casts: some linear LoRA whose masters are not already `dtype`."""
        return any(weights[0].dtype != dtype for _, weights in _linear_lora_weights(adapter_set))

    @contextlib.contextmanager
    def in_use(self):
        """The block's adapted layers compute with copies of the weights as they are now (for one
        optimizer step: the weights must not change inside it), then with the masters again."""
        with torch.no_grad():
            torch._foreach_copy_(self.copies, self.masters)
        # object.__setattr__: Module.__setattr__'s checks for parameters and submodules, per adapter and
        # step, were measurable next to the rest of the step's CPU work
        for i, adapter in enumerate(self.adapters):
            object.__setattr__(adapter, "compute_weights", (self.copies[2 * i], self.copies[2 * i + 1]))
        try:
            yield self
        finally:
            for adapter in self.adapters:
                object.__setattr__(adapter, "compute_weights", None)
            for copy in self.copies:
                copy.grad = None

    def fold_gradients(self):
        """Add the copies' gradients of the last backward pass to the masters' (in fp32), and clear them."""
        fresh, fresh_from, summed, summed_from = [], [], [], []
        for master, copy, gradient in zip(self.masters, self.copies, self.gradients):
            grad = copy.grad
            if grad is None:
                continue
            copy.grad = None
            if master.grad is None:
                master.grad = gradient
                fresh.append(gradient)
                fresh_from.append(grad)
            else:
                summed.append(master.grad)
                summed_from.append(grad)
        with torch.no_grad():
            if fresh:
                torch._foreach_copy_(fresh, fresh_from)
            if summed:
                torch._foreach_add_(summed, summed_from)
