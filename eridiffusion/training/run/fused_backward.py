"""The fused backward pass (MemoryOptions' fused_backward, as kohya's --fused_backward_pass): trained
tensors stepped by the run's optimizer as soon as the step's last backward has accumulated their gradients,
a bucket of them at a time, which are then freed, so no step holds every gradient at once (a full
fine-tune's gradients are as large as its weights). The optimizer, its state, the schedule and the saved
state stay the run's own: each update is the optimizer's step over those tensors, each on its own.
Gradients are clipped per tensor (max_grad_norm), as kohya's fused pass clips them; the step's gradient
norm is still the total one."""

import contextlib

import torch

from ...errors import EriDiffusionError

# optimizers whose step over one tensor is their step over all (Prodigy estimates one step size from
# every tensor's gradient at once)
PER_TENSOR_OPTIMIZERS = ("AdamW", "AdamW8bit", "Adafactor", "Lion", "Lion8bit")


# Gradients held at once before the optimizer steps them together: an optimizer step over one tensor cost
# ~0.5 ms of Python (SDXL's 1,066 linear weights: 1.24 s a step on an H200, longer than the GPU's work);
# over a bucket of tensors the step's own overhead is paid once, and 64 MB is 1% of SDXL's weights in fp32.
BUCKET_BYTES = 64 * 2**20


class FusedBackward:
    """Hooks on `parameters` that step `optimizer` over them as their gradients complete (while `stepping`),
    a bucket of about BUCKET_BYTES of gradients at a time."""

    def __init__(self, optimizer, parameters, max_grad_norm):
        self.optimizer, self.max_grad_norm = optimizer, max_grad_norm
        self.bucket_bytes = BUCKET_BYTES
        # each tensor's group by its place: a resumed run's optimizer.load_state_dict replaces the group dicts
        # (keeping their order and tensors), and the groups' settings (the schedule's lr) are the new ones'
        self.group_of = {id(p): i for i, group in enumerate(optimizer.param_groups) for p in group["params"]}
        self.armed, self.norm_squared = False, None
        self.pending, self.pending_bytes = [], 0
        self.handles = [p.register_post_accumulate_grad_hook(self._ready) for p in parameters if p.requires_grad]

    @contextlib.contextmanager
    def stepping(self):
        """Within: the backward steps each tensor once its gradient is whole (the step's last backward; the
        earlier ones of grad_accum or several micro-batches only accumulate); at the end, the last bucket."""
        self.armed = True
        try:
            yield
            self._step_pending()
        finally:
            self.armed = False
            self.pending, self.pending_bytes = [], 0

    def _ready(self, param):
        if not self.armed:
            return
        self.pending.append(param)
        self.pending_bytes += param.grad.numel() * param.grad.element_size()
        if self.pending_bytes >= self.bucket_bytes:
            self._step_pending()

    def _step_pending(self):
        params, self.pending, self.pending_bytes = self.pending, [], 0
        if not params:
            return
        grads = [p.grad.detach() for p in params]
        norms = torch._foreach_norm(grads, 2, dtype=torch.float32)
        device = norms[0].device  # (a trained text encoder's tensors may sit on another device)
        squared = torch.stack([norm.to(device) for norm in norms]).square().sum()
        self.norm_squared = squared if self.norm_squared is None else self.norm_squared + squared
        if self.max_grad_norm > 0:  # (clip_grad_norm_'s rule, per tensor)
            factors = torch._foreach_reciprocal(torch._foreach_add(norms, 1e-6))  # (a few kernels a bucket)
            torch._foreach_mul_(factors, self.max_grad_norm)
            torch._foreach_clamp_max_(factors, 1.0)
            torch._foreach_mul_(grads, factors)
        groups = self.optimizer.param_groups
        kept = [group["params"] for group in groups]
        for group in groups:
            group["params"] = []
        for param in params:
            groups[self.group_of[id(param)]]["params"].append(param)
        try:
            self.optimizer.step()
        finally:
            for group, kept_params in zip(groups, kept, strict=True):
                group["params"] = kept_params
        for param in params:
            param.grad = None

    def step_norm(self, device):
        """The total gradient norm of the step just taken (before clipping), a device tensor; reset."""
        norm = torch.zeros((), device=device) if self.norm_squared is None else self.norm_squared.sqrt()
        self.norm_squared = None
        return norm

    def remove(self):
        for handle in self.handles:
            handle.remove()


def check_fused_backward(config, world_size=1):
    """fused_backward with settings that step per tensor: an optimizer whose step is per tensor, no loss
    scaler (fp16 on CUDA), no skipped steps (on_nan skip decides after every gradient is known), one
    process (the gradients are averaged over processes whole), and no CUDA graphs (the hooks step outside
    a replayed backward)."""
    if not config.fused_backward:
        return
    clashes = [
        (config.optimizer not in PER_TENSOR_OPTIMIZERS, f"optimizer {config.optimizer}", "AdamW or Adafactor"),
        (config.dtype == "fp16", "dtype fp16 (its loss scaler unscales every gradient at once)", "dtype bf16"),
        (config.on_nan == "skip", "on_nan skip (it decides after every gradient is known)", "on_nan stop"),
        (world_size > 1, f"{world_size} processes (their gradients are averaged whole)", "one process"),
        (config.cuda_graphs == "on", "cuda_graphs on (the updates run outside a replay)", "cuda_graphs auto"),
    ]
    for clash, what, fix in clashes:
        if clash:
            raise EriDiffusionError(
                f"fused_backward steps each tensor as its gradient completes, which {what} cannot do: set {fix}, "
                "or fused_backward off."
            )
