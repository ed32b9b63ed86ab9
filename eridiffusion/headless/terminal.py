"""What a headless run shows and hears: a progress bar (loss, s/step, ETA, peak VRAM), a line per
sample and checkpoint, TensorBoard event files when asked for, and Ctrl-C (the first stops at the
next step boundary and saves, as the page's Stop & save does; the second aborts)."""

import os
import signal
import sys

from ..errors import EriDiffusionError

BAR_FORMAT = "{desc}{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_inv_fmt}{postfix}]"


def say(line):
    """A line on the terminal that leaves a progress bar in place."""
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)


def _interactive():
    return sys.stderr.isatty()


def tensorboard_writer_class():
    """torch's SummaryWriter; an error with the fix when the tensorboard package is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:
        raise EriDiffusionError(
            f"logging.tensorboard is true, but TensorBoard cannot be used here ({error}): "
            "install it (`pip install tensorboard`) or set logging.tensorboard to false."
        ) from None
    return SummaryWriter


class CtrlC:
    """While active, the first Ctrl-C asks the run to stop at the next step boundary; a second one
    raises KeyboardInterrupt (abort: checkpoints already written stay). `announce`: say so on the
    terminal (under torchrun, which hands a Ctrl-C to every process, rank 0 alone does)."""

    def __init__(self, announce=True):
        self.requested = False
        self.announce = announce
        self._previous = None

    def __enter__(self):
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum, frame):
        if self.requested:
            signal.signal(signal.SIGINT, self._previous)
            raise KeyboardInterrupt
        self.requested = True
        if self.announce:
            say("Ctrl-C: stopping after this step and saving (Ctrl-C again aborts)")


class TrainingProgress:
    """The trainer's hooks for a terminal: `steps` in all, continuing from `start`."""

    def __init__(self, steps, start, run_dir, stop, tensorboard=False):
        from tqdm import tqdm

        self.run_dir, self.stop = run_dir, stop
        self.checkpoints_dir = os.path.join(run_dir, "checkpoints")
        self.checkpoints_seen = set()
        self.bar = tqdm(
            total=steps,
            initial=start,
            desc="train ",
            unit="step",
            bar_format=BAR_FORMAT,
            dynamic_ncols=True,
            file=sys.stderr,
            mininterval=0.5 if _interactive() else 30,
        )
        self.writer = tensorboard_writer_class()(os.path.join(run_dir, "tensorboard")) if tensorboard else None
        self.loss = None
        self.vram = None

    def hooks(self):
        from ..training.run.trainer import TrainingHooks  # (the trainer: imported once a run starts)

        return TrainingHooks(
            on_progress=self.on_progress, should_stop=lambda: self.stop.requested, on_samples=self.on_samples
        )

    def on_progress(self, step, total, new_losses, stats):
        if new_losses:
            finite = [v for v in new_losses if v is not None]
            self.loss = sum(finite) / len(finite) if finite else None
            if self.writer is not None:
                for offset, value in enumerate(new_losses):
                    if value is not None:
                        self.writer.add_scalar("train/loss", value, step - len(new_losses) + 1 + offset)
                self.writer.add_scalar("train/learning_rate", stats.get("lr", 0.0), step)
        if "peak_vram_gib" in stats:
            self.vram = stats["peak_vram_gib"]
        postfix = []
        if self.loss is not None:
            postfix.append(f"loss {self.loss:.4g}")
        if self.vram is not None:
            postfix.append(f"VRAM {self.vram:.1f} GiB")
        self.bar.set_postfix_str(", ".join(postfix), refresh=False)
        self.bar.update(step - self.bar.n)
        self.report_checkpoints()

    def on_samples(self, step, grid, paths):
        say(f"step {step}: samples {', '.join(os.path.relpath(p) for p in paths)}")
        if self.writer is not None:
            self.writer.add_image("samples", grid[0].numpy(), step, dataformats="HWC")

    def report_checkpoints(self):
        """A line for each checkpoint written since the last look (the trainer saves after its
        progress call, so a checkpoint shows at the next step or when the run ends)."""
        if not os.path.isdir(self.checkpoints_dir):
            return
        for name in sorted(os.listdir(self.checkpoints_dir)):
            if name.endswith(".safetensors") and name not in self.checkpoints_seen:
                self.checkpoints_seen.add(name)
                say(f"checkpoint {os.path.relpath(os.path.join(self.checkpoints_dir, name))}")

    def close(self, result=None):
        self.bar.close()
        self.report_checkpoints()
        if self.writer is not None:
            if result is not None:
                self.writer.add_scalar("eval/loss_before", result.eval_loss_before, 0)
                self.writer.add_scalar("eval/loss_after", result.eval_loss_after, len(result.losses))
            self.writer.close()


def caching_progress(total):
    """A bar for CacheLatents' encoding: a progress(done, total) callback and the bar to close."""
    from tqdm import tqdm

    bar = tqdm(
        total=total,
        desc="cache ",
        unit="image",
        dynamic_ncols=True,
        file=sys.stderr,
        mininterval=0.5 if _interactive() else 30,
    )

    def progress(done, count):
        bar.total = count  # a run of several processes counts this process's share
        bar.update(done - bar.n)

    return progress, bar
