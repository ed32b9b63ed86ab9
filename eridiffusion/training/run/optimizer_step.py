"""One optimizer step: each micro-batch's forward and backward along the step path, the gradients
averaged over the processes, unscaled and clipped, the update (left out for a non-finite step with
on_nan=skip), the EMA and the schedule. Nothing is read back: the step's loss and gradient norm stay
on the device (non_finite.StepHealth) until the next logging step."""

import contextlib
import time

import torch

from .non_finite import gradient_norm, skip_on_device


class OptimizerStep:
    """The steps of TrainingRun `run`: micro-batches from `micro_batches` (MicroBatches), losses and
    gradients along `path` (speed/step_path.StepPath), each step's loss and norm into `health`."""

    def __init__(self, run, path, micro_batches, health):
        self.run, self.path, self.micro_batches, self.health = run, path, micro_batches, health
        self.skip_on_the_device = skip_on_device(run.optimizer, run.scaler)
        self.first_started = self.first_seconds = None  # when the first step began, and its seconds

    def __call__(self, step):
        if self.first_started is None:  # (its graph capture or compile included: waited for once)
            self.first_started = self._now()
            self._step(step)
            self._settle_placement()
            self.first_seconds = self._now() - self.first_started
        else:
            self._step(step)

    def _settle_placement(self):
        """The VRAM budget's plan, from the first step's memory: its graphs, captured with the first
        placement, go before the blocks move (their memory with them), and are captured again."""
        swap = self.run.block_swap
        if swap is None or swap.settled:
            return
        if swap.on_settle is not None:
            swap.measure()
            self.path.drop_graphs()
        swap.settle()

    def _now(self):
        if self.run.device.type == "cuda":
            torch.cuda.synchronize(self.run.device)
        return time.perf_counter()

    def _step(self, step):
        run, config, fused = self.run, self.run.config, self.run.fused_backward
        step_loss = torch.zeros((), device=run.device)
        with self.path.step():
            backwards, last = 0, config.grad_accum * self.micro_batches.per_round
            for _ in range(config.grad_accum):
                for batch, weight in self.micro_batches.of_step(step):
                    loss = self.path.loss(batch)
                    loss = (loss if weight is None else weight * loss) / config.grad_accum
                    backwards += 1
                    updating = fused is not None and backwards == last
                    with fused.stepping() if updating else contextlib.nullcontext():
                        self.path.backward(loss, run.scaler, more=backwards < last)
                    step_loss += loss.detach()
        if fused is not None:  # (each tensor stepped in the backward: fused_backward.py)
            norm = fused.step_norm(run.device)
        else:
            # several processes: the gradients summed over the micro-batches, then averaged (DDP with no_sync)
            step_loss = run.processes.average_gradients(run.trained.parameters(), step_loss)
            run.scaler.unscale_(run.optimizer)
            norm = gradient_norm(run.trained.parameters(), config.max_grad_norm)
            finite = self.health.finite(step_loss, norm) if config.on_nan == "skip" else None
            self.update(finite)
        if run.ema is not None:
            run.ema.update()
        run.scheduler.step()
        run.optimizer.zero_grad(set_to_none=True)
        self.health.record(step, step_loss, norm)

    def update(self, finite):
        """The scaled optimizer update. With `finite` (on_nan=skip), a step where it is False leaves the
        adapters and the optimizer's state as they were: decided on the device where the optimizer
        can, else by reading the flag back."""
        run = self.run
        if finite is None:
            run.scaler.step(run.optimizer)
        elif self.skip_on_the_device:
            run.optimizer.found_inf = (~finite).float()
            try:
                run.optimizer.step()
            finally:
                del run.optimizer.found_inf
        elif bool(finite):
            run.scaler.step(run.optimizer)
        run.scaler.update()
