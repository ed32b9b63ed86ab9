"""The LoRA weights in the model's compute dtype, cast once per optimizer step instead of in every layer.

The adapters' master weights are fp32 and the model computes in bf16 (or fp16), so each adapted layer
cast its two weights forward and autograd cast their two gradients back: 4 of the 10 kernels a LoRA
adds to a layer, and more of the CPU's work per layer, which paces a step without CUDA graphs. Here
the weights are cast in one multi-tensor copy when a step starts, the layers compute with those
copies, and after each backward pass the copies' gradients are added to the masters' in one more.
The result is the one the per-layer casts give: each layer's gradient is computed in the compute
dtype either way, and summed over micro-batches in fp32.

The copies also let layers that take one input share a down-projection (adapters/shared_input.py):
the first step learns which do, and their down copies are laid out as one matrix from then on.

A step replayed from CUDA graphs computes with the copies too: the casts cost no CPU time there, but
each was a kernel of its own in the graph (four per layer, 2,240 in an SDXL step), run by the GPU
one after another. The graph takes the copies as trained inputs and hands out their gradients, which
go to the masters as in an eager step; shared-input groups stay off there (they move the copies)."""

import contextlib

import torch

from .shared_input import CallRecorder, SharedInputGroup


def _linear_lora_weights(adapter_set):
    """(adapter, [down, up]) of each linear LoRA of `adapter_set` (other adapters have no linear_weights)."""
    for _, adapter in adapter_set.items():
        weights = getattr(adapter, "linear_weights", lambda: None)()
        if weights is not None:
            yield adapter, weights


class ComputeCopies:
    """Compute-dtype copies of the linear LoRA adapters' weights of an AdapterSet."""

    def __init__(self, adapter_set, dtype, share_inputs=True):
        self.adapters, self.masters = [], []
        for adapter, weights in _linear_lora_weights(adapter_set):
            self.adapters.append(adapter)
            self.masters += weights
        with torch.inference_mode(False):  # the copies are autograd leaves; a node may run this in inference mode
            self.copies = [torch.nn.Parameter(torch.empty_like(m, dtype=dtype)) for m in self.masters]
            # the masters' gradients live here from step to step (the optimizer's zero_grad lets go of them)
            self.gradients = [torch.empty_like(m) for m in self.masters]
        # SharedInputGroups; None until the first step has shown which layers share an input
        self.groups: list[SharedInputGroup] | None = None if share_inputs else []

    def graphed_parameters(self):
        """A module holding the copies as parameters: what a CUDA graph of the step (cuda_graphs.GraphedCall)
        takes as trained inputs beside the masters, whose gradients its backward hands out. The graph
        reads the copies where they are, so they must keep their place: no shared-input groups."""
        if self.groups != []:
            raise ValueError("ComputeCopies with shared-input groups cannot be graphed (share_inputs=False)")
        return torch.nn.ParameterList(self.copies)

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
        recorder = CallRecorder() if self.groups is None else None
        for i, adapter in enumerate(self.adapters):
            object.__setattr__(adapter, "compute_weights", (self.copies[2 * i], self.copies[2 * i + 1]))
            object.__setattr__(adapter, "input_group", recorder)
        for group in self.groups or ():
            for adapter, _ in group.members:
                object.__setattr__(adapter, "input_group", group)
        try:
            yield self
        finally:
            for adapter in self.adapters:
                object.__setattr__(adapter, "compute_weights", None)
                object.__setattr__(adapter, "input_group", None)
            for copy in self.copies:
                copy.grad = None
            if recorder is not None:
                self.groups = [self._shared_input_group(members) for members in recorder.groups()]
            assert self.groups is not None  # (None only until the recorder of a first step has set them)
            for group in self.groups:
                group.pending = None
            self.groups = [group for group in self.groups if not group.missed]

    def _shared_input_group(self, members):
        """A SharedInputGroup of `members` ([(adapter, layer)]), their down copies made row blocks of one matrix."""
        index = {id(adapter): i for i, adapter in enumerate(self.adapters)}
        slots = [2 * index[id(adapter)] for adapter, _ in members]
        downs = [self.copies[slot] for slot in slots]
        with torch.inference_mode(False):
            stacked = downs[0].new_empty((sum(d.shape[0] for d in downs), downs[0].shape[1]))
            start = 0
            for slot, down in zip(slots, downs):
                # a leaf of its own (its gradient is a row block of the group's) sharing the matrix's memory
                self.copies[slot] = stacked[start : start + down.shape[0]].detach().requires_grad_(True)
                start += down.shape[0]
        return SharedInputGroup(members, stacked)

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
