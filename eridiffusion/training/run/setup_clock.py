"""Where a run's time goes outside its steps: before its first step (the summary's `setup_phases`) and in
what it writes and measures between steps (`between_steps_phases`: checkpoints, validation, the best file),
each phase's seconds, its device work waited for, so a slow start or a slow checkpoint names its cause."""

import time

import torch


class SetupClock:
    """Seconds per setup phase, each phase ending at `mark` (after the device finished its work)."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.phases: dict[str, float] = {}

    def restart(self, device: torch.device | None = None) -> None:
        """Phases from here on (the device's work queued so far, the steps', waited for and left out)."""
        if device is not None and device.type == "cuda":
            torch.cuda.synchronize(device)
        self.last = time.perf_counter()

    def mark(self, phase: str, device: torch.device | None = None) -> None:
        """End `phase` (its seconds added to any earlier part of the same phase)."""
        if device is not None and device.type == "cuda":
            torch.cuda.synchronize(device)  # (once per phase of the setup: the next phase starts clean)
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - self.last
        self.last = now
