"""What a run writes as it goes, under its run folder: checkpoints with their training state
(keep_last drops the oldest), checkpoints/best.safetensors at the lowest validation loss, and
loss.json. With EMA, every file holds the averaged weights and the trained ones beside as *_raw.
Rank 0 writes; the other processes wait for it. The checkpoints and the best file are copied to host memory
here and written on the run's writer thread (background_writes.py) while the steps go on."""

import contextlib
import os
import shutil

from ...formats.atomic_file import write_json_atomic
from ...formats.lora_file import run_metadata
from ...formats.state_file import shards_path, state_content, state_path, write_state
from ...formats.trained_file import EXACT, TrainedFile, check_finite, raw_path
from . import run_state
from .build import TrainingRun

BEST = "best.safetensors"


def lora_of(run: TrainingRun, step: int) -> TrainedFile:
    """What TrainingRun `run` trained, after `step` steps, as a file's content: with EMA, the averaged
    weights, the trained ones as `raw`."""

    def export():
        return run.trained.file_content(run_metadata(run.base, run.config, run.data, step))

    if run.ema is None:
        return export()
    raw = export()
    with run.ema.applied():
        averaged = export()
    averaged.metadata["eridiffusion_weights"] = f"ema (decay {run.config.ema_decay:g}; trained weights: *_raw)"
    averaged.raw = raw
    return averaged


def averaged(run):
    """The block runs on the EMA weights when the run keeps them (sampling, validation)."""
    return run.ema.applied() if run.ema is not None else contextlib.nullcontext()


def checkpoint_path(run, name):
    return os.path.join(run.run_dir, "checkpoints", name)


def save_checkpoint(run, step):
    """Rank 0 writes the checkpoint after `step` steps, with its training state (and drops those
    keep_last lets go) while the others wait. Every process exports it and captures the state: sharded
    weights are gathered, and their optimizer's state written, by all of them at once."""
    path = checkpoint_path(run, f"{run.config.run_name}_step{step:06d}.safetensors")
    clock = run.between_steps
    clock.restart(run.device)
    lora = lora_of(run, step)
    clock.mark("checkpoint_export", run.device)
    if run.processes.is_main:
        check_finite(lora.tensors, lora.tensors, "fp32", path, lora.what)  # before its state is written
        if lora.raw is not None:
            check_finite(lora.raw.tensors, lora.raw.tensors, "fp32", raw_path(path), lora.what)
    clock.mark("checkpoint_check")
    state = run_state.capture(run, step, path)  # (sharded weights: every process writes its shards here)
    content = state_content(state) if run.processes.is_main else None
    clock.mark("checkpoint_state", run.device)
    kept = run.progress.checkpoints
    kept.append(path)
    keep = run.config.keep_last
    dropped = []
    if keep and len(kept) > keep:
        dropped, kept[:] = kept[:-keep], kept[-keep:]
    if run.processes.is_main:
        assert content is not None
        run.writes.hand_over("checkpoint_write", lambda: _write_checkpoint(path, content, lora, dropped))
        clock.mark("checkpoint_handed_over")
    run.processes.barrier()


def _write_checkpoint(path, state, lora, dropped):
    """On the writer thread: the training state, then the weights (a checkpoint is whole once both are), then
    the files of the checkpoints `dropped`."""
    write_state(path, state)
    lora.save(path, dtype=EXACT, overwrite=True)
    for file in [f for old in dropped for f in (old, state_path(old), raw_path(old))]:
        if os.path.exists(file):
            os.remove(file)
    for folder in [shards_path(old) for old in dropped if os.path.isdir(shards_path(old))]:
        shutil.rmtree(folder)


def record_validation(run, step, value):
    """The validation loss `value` after `step` steps: kept in the progress, the adapter written as
    best.safetensors when it is the lowest so far, the checks since the best counted."""
    progress = run.progress
    progress.validation_points.append([step, value])
    if progress.best is None or value < progress.best["loss"]:
        path = checkpoint_path(run, BEST)
        run.between_steps.restart()
        lora = lora_of(run, step)  # (by every process: sharded weights are gathered by all)
        run.between_steps.mark("best_export", run.device)
        if run.processes.is_main:  # (every process measured the same value)
            lora.metadata["validation_loss"] = repr(value)
            run.writes.hand_over("best_write", lambda: lora.save(path, dtype=EXACT, overwrite=True))
            run.between_steps.mark("best_handed_over")
        progress.best, progress.checks_since_best = {"step": step, "loss": value, "path": path}, 0
    else:
        progress.checks_since_best += 1
    return [step, value]


def write_loss_log(run):
    """loss.json: the training losses read back so far, and the validation points."""
    if not run.processes.is_main:
        return
    log = {"loss": run.progress.losses}
    if run.progress.validation_points:
        log["validation"] = run.progress.validation_points
    # rewritten at every read-back, right after the device sync: not waited onto the disk
    write_json_atomic(os.path.join(run.run_dir, "loss.json"), log, durable=False)
