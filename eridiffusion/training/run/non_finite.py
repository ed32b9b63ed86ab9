"""Catching a diverged run without reading anything back per step: each step's loss and gradient
norm stay on the device and come back with the logging step's losses (one read). A non-finite one
stops the run naming the step and the likely cause, or, with on_nan=skip, that step's update is
left out."""

import torch

from ...errors import EriDiffusionError

ON_NAN = ("stop", "skip")
# on_nan=skip: this many skipped steps in a row means the run has diverged for good.
MAX_SKIPS_IN_A_ROW = 10


def gradient_norm(parameters, max_norm):
    """The total gradient norm of `parameters` as a device tensor; the gradients are clipped to
    `max_norm` first when it is > 0 (clip_grad_norm_, which computes the same norm). Sharded gradients
    (sharding fsdp) give the norm of the whole, summed over the processes."""
    parameters = list(parameters)
    if max_norm > 0:
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    else:
        norm = torch.nn.utils.get_total_norm([p.grad for p in parameters if p.grad is not None])
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


class StepHealth:
    """The loss and gradient norm of every step of a run, on the device; read back in one piece.

    With a loss scaler (fp16 on CUDA) infinite gradients are the scaler's business (it skips
    that update and lowers its scale), so only the loss counts there."""

    def __init__(self, steps, device, on_nan, scaler_enabled):
        self.losses = torch.zeros(steps, device=device)
        self.norms = torch.zeros(steps, device=device)
        self.on_nan, self.gradients_count = on_nan, not scaler_enabled
        self.skipped, self.bad_in_a_row = 0, 0

    def finite(self, loss, norm):
        """A device bool: this step's loss (and gradients) are finite."""
        return torch.isfinite(loss) & torch.isfinite(norm) if self.gradients_count else torch.isfinite(loss)

    def record(self, step, loss, norm):
        self.losses[step] = loss
        self.norms[step] = norm

    def read(self, start, end):
        """(losses, gradient norms) of steps start..end-1 as Python floats: the one device sync."""
        losses, norms = torch.stack((self.losses[start:end], self.norms[start:end])).tolist()
        return losses, norms

    def bad_steps(self, start: int, losses: list[float], norms: list[float]) -> list[tuple[int, float, float]]:
        """(step number, loss, gradient norm) of the non-finite steps among those read back."""
        bad: list[tuple[int, float, float]] = []
        for offset, (loss, norm) in enumerate(zip(losses, norms)):
            if not _finite(loss) or (self.gradients_count and not _finite(norm)):
                bad.append((start + offset + 1, loss, norm))
        return bad

    def count(self, start: int, losses: list[float], norms: list[float]) -> list[tuple[int, float, float]]:
        """Count the skipped steps among those read back; returns the bad ones."""
        bad = self.bad_steps(start, losses, norms)
        bad_numbers = {number for number, _, _ in bad}
        for number in range(start + 1, start + len(losses) + 1):
            self.bad_in_a_row = self.bad_in_a_row + 1 if number in bad_numbers else 0
        self.skipped += len(bad)
        return bad


def _finite(value):
    return value == value and value not in (float("inf"), float("-inf"))


def skip_on_device(optimizer, scaler):
    """Whether `optimizer` can leave out an update from a device flag: torch's fused optimizers take
    a `found_inf` tensor, as GradScaler hands them one, and skip their update (step count too)
    when it is 1. GradScaler sets that attribute itself when it is on."""
    return getattr(optimizer, "_step_supports_amp_scaling", False) and not scaler.is_enabled()


def diverged_error(step, loss, norm, config, first_step, checkpoint, skipped_in_a_row=0):
    """The EriDiffusionError for a run whose step `step` had a non-finite loss or gradient."""
    what = f"the loss is {loss:g}" if not _finite(loss) else f"the loss is {loss:.4g} but the gradient norm is {norm:g}"
    causes = []
    if step == first_step:
        causes.append(
            "the data or the starting weights (the run's first step already failed: a NaN in a latent, a "
            "caption's encoding or a resumed LoRA)"
        )
    high = 10.0 if config.optimizer == "Prodigy" else 1e-3
    if config.learning_rate > high:
        causes.append(
            f"learning_rate {config.learning_rate:g} is high for {config.optimizer} (LoRA usually trains at "
            f"{'1.0' if config.optimizer == 'Prodigy' else '1e-4 to 1e-3'})"
        )
    if config.dtype == "fp16":
        causes.append("dtype fp16 overflows easily: use bf16 or fp32")
    if not causes:
        causes.append(
            f"a NaN or infinite value in the data, or learning_rate {config.learning_rate:g} is too high for this model"
        )
    kept = (
        f"The last finite checkpoint is {checkpoint}."
        if checkpoint
        else "No checkpoint was written before it (save_every writes them)."
    )
    head = (
        f"training diverged: {skipped_in_a_row} steps in a row were non-finite up to step {step} of "
        f"{config.steps}, and on_nan=skip only leaves out single bad steps"
        if skipped_in_a_row
        else f"training stopped at step {step} of {config.steps}: {what}"
    )
    advice = "" if skipped_in_a_row else " Set on_nan to skip to leave such steps out instead."
    return EriDiffusionError(f"{head}. Likely cause: {'; '.join(causes)}. {kept}{advice}")
