"""What of a run's loop an exact continuation needs beside the adapter weights (step, optimizer,
LR schedule, loss scaler, batch order, random generators, losses), and the settings that must not
change between the run that wrote it and the one that resumes it. resume.py stores it in a file."""

import hashlib
import json

import torch

from .errors import EriDiffusionError
from .resume import state_path

# Settings a resumed run may change: how long it runs, where it writes, and how fast it runs.
FREE_ON_RESUME = (
    "steps",
    "run_name",
    "save_every",
    "keep_last",
    "log_every",
    "eval_timesteps",
    "eval_images",
    "cuda_graphs",
    "weights_vram_gib",
    "torch_compile",
    "on_nan",
    "validate_every",
    "early_stop_patience",
)


def resumable_settings(config):
    """The settings a resumed run must share with the run that wrote the state."""
    return {k: v for k, v in config.as_dict().items() if k not in FREE_ON_RESUME}


def config_fingerprint(config):
    return hashlib.sha256(json.dumps(resumable_settings(config), sort_keys=True).encode()).hexdigest()[:16]


def capture(run, step):
    """The loop state of TrainingRun `run` after `step` steps."""
    return {
        "step": step,
        "optimizer": run.optimizer.state_dict(),
        "scheduler": run.scheduler.state_dict(),
        "scaler": run.scaler.state_dict(),
        "batches": run.batches.state(),
        "prior_batches": run.prior_batches.state() if run.prior_batches is not None else None,
        "choice": run.choice.getstate(),
        "noise": run.noise_gen.get_state(),
        "losses": list(run.losses),
        "eval_loss_before": run.eval_before,
        "validation": [list(point) for point in run.validation_points],
        "best": dict(run.best) if run.best else None,
        "checks_since_best": run.checks_since_best,
        # with EMA the checkpoint file holds the averages: the trained weights come back from here
        "ema": run.ema.state() if run.ema is not None else None,
        "trained_parameters": [p.detach() for p in run.ema.parameters] if run.ema is not None else None,
        "config_fingerprint": config_fingerprint(run.config),
        "config": run.config.as_dict(),
    }


def restore(run, state, path):
    """Put TrainingRun `run` back where `state` (read beside the adapter at `path`) left it."""
    if state["config_fingerprint"] != config_fingerprint(run.config):
        changed = sorted(k for k, v in resumable_settings(run.config).items() if state["config"].get(k) != v)
        raise EriDiffusionError(
            f"{state_path(path)} was written with other settings ({', '.join(changed)} "
            "differ); use the same settings to resume, or start a new run."
        )
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    run.scaler.load_state_dict(state["scaler"])
    run.batches.load_state(state["batches"])
    if run.prior_batches is not None and state.get("prior_batches") is not None:
        run.prior_batches.load_state(state["prior_batches"])
    run.choice.setstate(state["choice"])
    run.noise_gen.set_state(state["noise"].to(run.noise_gen.get_state().device))
    run.start_step, run.losses = state["step"], list(state["losses"])
    run.eval_before = state["eval_loss_before"]
    # (states written before validation existed have none of it)
    run.validation_points = [list(point) for point in state.get("validation", [])]
    run.best, run.checks_since_best = state.get("best"), state.get("checks_since_best", 0)
    if run.ema is not None:
        run.ema.load_state(state["ema"])
        with torch.no_grad():
            for parameter, trained in zip(run.ema.parameters, state["trained_parameters"]):
                parameter.copy_(trained)
