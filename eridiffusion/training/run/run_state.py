"""What of a run's loop an exact continuation needs beside the adapter weights (step, optimizer,
LR schedule, loss scaler, batch order, random generators, losses), and the settings that must not
change between the run that wrote it and the one that resumes it (formats/state_file.py stores it).
The state is the same in every process of a multi-process run (rank 0 writes it) and holds the
global step and the samples seen, so a run continues on another number of processes as long as
the global batch stays."""

import hashlib
import json
from dataclasses import dataclass, field

import torch

from ...errors import EriDiffusionError
from ...formats.state_file import damaged_state_fix, shards_path, state_path
from .config import NESTED, TrainConfig


@dataclass
class RunProgress:
    """How far a run has come: what the loop updates as it goes and a resume restores."""

    start_step: int = 0  # the step this process's loop starts at (a resumed run's saved step)
    losses: list = field(default_factory=list)  # training loss of every step read back so far
    eval_before: float | None = None  # the evaluation loss before the first step
    validation_points: list = field(default_factory=list)  # [[step, validation loss], ...]
    best: dict | None = None  # {"step", "loss", "path"} of the lowest validation loss
    checks_since_best: int = 0
    checkpoints: list = field(default_factory=list)  # the periodic checkpoints kept (keep_last), oldest first


def _whole(low=0):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low


def _number_or_none(v):
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _list_of(test):
    return lambda v: isinstance(v, list) and all(test(item) for item in v)


def _or_none(test):
    return lambda v: v is None or test(v)


def _random_state(v):  # random.Random.getstate(): (version, 625 ints, gauss_next)
    return isinstance(v, tuple) and len(v) == 3 and isinstance(v[1], tuple) and all(isinstance(i, int) for i in v[1])


def _batch_order(v):
    return isinstance(v, dict) and _random_state(v.get("generator")) and _list_of(_list_of(_whole()))(v.get("pending"))


def _validation_point(v):
    return isinstance(v, list) and len(v) == 2 and _whole()(v[0]) and _number_or_none(v[1])


def _best(v):
    return isinstance(v, dict) and _whole()(v.get("step")) and _number_or_none(v.get("loss")) and "path" in v


def _settings(v):  # TrainConfig.as_dict(): its nested settings (adapter, objective, precision) are mappings too
    return isinstance(v, dict) and all(isinstance(v.get(name, {}), dict) for name in NESTED)


# The training state's schema: (key, required, what it must be, its test). States written before a
# key existed lack the optional ones.
STATE_SCHEMA = (
    ("step", True, "a whole number >= 0", _whole()),
    ("optimizer", True, "the optimizer's state (a mapping)", lambda v: isinstance(v, dict)),
    ("scheduler", True, "the schedule's state (a mapping)", lambda v: isinstance(v, dict)),
    ("scaler", True, "the loss scaler's state (a mapping)", lambda v: isinstance(v, dict)),
    ("batches", True, "the batch order's state", _batch_order),
    ("prior_batches", False, "the class images' batch order's state", _or_none(_batch_order)),
    ("choice", True, "a random generator's state", _random_state),
    ("noise", True, "a random generator's state (a byte tensor)", lambda v: isinstance(v, torch.Tensor)),
    ("losses", True, "a list of the steps' losses", _list_of(_number_or_none)),
    ("eval_loss_before", True, "a number", _number_or_none),
    ("validation", False, "a list of [step, loss] pairs", _list_of(_validation_point)),
    ("best", False, "the best validation point", _or_none(_best)),
    ("checks_since_best", False, "a whole number >= 0", _whole()),
    ("ema", False, "the EMA's state", _or_none(lambda v: isinstance(v, dict))),
    ("trained_parameters", False, "a list of tensors", _or_none(_list_of(lambda t: isinstance(t, torch.Tensor)))),
    ("config", True, "the run's settings (a mapping)", _settings),
    ("world_size", False, "a whole number >= 1", _whole(1)),
    ("samples_seen", False, "a whole number >= 0", _whole()),
)


def check_state(state, path, adapter_path):
    """`state` as read from `path` (beside `adapter_path`) when it fits STATE_SCHEMA: its values of the
    right types and bounds, one loss per step. Anything else is one damaged-state error."""

    def damaged(what):
        return EriDiffusionError(f"training state {path} is damaged ({what}); {damaged_state_fix(path, adapter_path)}")

    if not isinstance(state, dict):
        raise damaged("it holds no mapping of a run's state")
    for key, required, what, test in STATE_SCHEMA:
        if key not in state:
            if required:
                raise damaged(f"it has no '{key}'")
            continue
        if not test(state[key]):
            raise damaged(f"its '{key}' is not {what}")
    if len(state["losses"]) != state["step"]:
        raise damaged(f"it is at step {state['step']} but holds {len(state['losses'])} losses")
    if any(point[0] > state["step"] for point in state.get("validation", [])):
        raise damaged("it holds a validation check after its own step")
    return state


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
    "vram_budget_gib",
    "blocks_to_swap",
    "base_quantization",
    "torch_compile",
    "fp8_compute",
    "on_nan",
    "device",
    "validate_every",
    "early_stop_patience",
)


def _resumable(values, world_size):
    kept = {k: v for k, v in values.items() if k not in FREE_ON_RESUME}
    # the batch that counts is the global micro-batch: 2 processes x batch_size 1 draw the samples,
    # noise and noise levels 1 process x batch_size 2 draws (trainer.py), so either continues the other
    batch = values["batch_size"]
    kept["batch_size"] = batch * world_size if isinstance(batch, int) else batch  # (a damaged state's: differs)
    return kept


def resumable_settings(config, world_size=1):
    """The settings a resumed run must share with the run that wrote the state (batch_size as
    batch_size x the number of processes)."""
    return _resumable(config.as_dict(), world_size)


def config_fingerprint(config, world_size=1):
    return hashlib.sha256(json.dumps(resumable_settings(config, world_size), sort_keys=True).encode()).hexdigest()[:16]


def _with_defaults(written):
    """The settings of a state file with those added since it was written at their defaults: the run
    that wrote it trained as their defaults do (a setting is only added with a default that keeps
    earlier behaviour), so it continues."""
    defaults = TrainConfig().as_dict()
    merged = {**defaults, **written}
    for nested in NESTED:
        merged[nested] = {**defaults[nested], **written.get(nested, {})}
    return merged


def _global_batch_advice(state, config, world_size):
    written_processes = state.get("world_size", 1)
    written = state["config"]["batch_size"] * written_processes
    fix = (
        f"set batch_size to {written // world_size} for {world_size} process(es)"
        if written % world_size == 0
        else f"run it on a number of processes that divides {written}"
    )
    return (
        f"the global batch (batch_size x processes) was {written_processes} x {state['config']['batch_size']} = "
        f"{written} and is {world_size} x {config.batch_size} = {config.batch_size * world_size} here: {fix}"
    )


def capture(run, step, path):
    """The loop state of TrainingRun `run` after `step` steps, for the checkpoint at `path` (asked of every
    process: sharded weights write their optimizer's state beside it)."""
    return {
        "step": step,
        "optimizer": run.trained.optimizer_state(run.optimizer, shards_path(path)),
        "scheduler": run.scheduler.state_dict(),
        "scaler": run.scaler.state_dict(),
        "batches": run.batches.state(),
        "prior_batches": run.prior_batches.state() if run.prior_batches is not None else None,
        "choice": run.choice.getstate(),
        "noise": run.noise_gen.get_state(),
        "losses": list(run.progress.losses),
        "eval_loss_before": run.progress.eval_before,
        "validation": [list(point) for point in run.progress.validation_points],
        "best": dict(run.progress.best) if run.progress.best else None,
        "checks_since_best": run.progress.checks_since_best,
        # with EMA the checkpoint file holds the averages: the trained weights come back from here
        "ema": run.ema.state() if run.ema is not None else None,
        "trained_parameters": [p.detach() for p in run.trained.parameters()] if run.ema is not None else None,
        "config_fingerprint": config_fingerprint(run.config, run.processes.world_size),
        "config": run.config.as_dict(),
        "world_size": run.processes.world_size,
        "samples_seen": step * run.config.grad_accum * run.config.batch_size * run.processes.world_size,
    }


def check_resumable(state, config, world_size, path):
    """Refuse to continue `state` (read beside the adapter at `path`) with TrainConfig `config` on
    `world_size` processes when a setting that must stay differs: checked before a run makes its
    folder or loads anything."""
    written = _resumable(_with_defaults(state["config"]), state.get("world_size", 1))
    if written != resumable_settings(config, world_size):
        changed = sorted(k for k, v in resumable_settings(config, world_size).items() if written.get(k) != v)
        if changed == ["batch_size"] and isinstance(state["config"].get("batch_size"), int):
            raise EriDiffusionError(
                f"{state_path(path)} continues exactly only with the batch it was trained with: "
                f"{_global_batch_advice(state, config, world_size)}."
            )
        raise EriDiffusionError(
            f"{state_path(path)} was written with other settings ({', '.join(changed)} "
            "differ); use the same settings to resume, or start a new run."
        )


def check_state_fits_data(state, path, samples, class_samples):
    """Refuse a `state` (read beside the adapter at `path`) whose pending batches draw images beyond this
    run's `samples` training and `class_samples` regularization samples: it was written for other data."""
    for name, count in (("batches", samples), ("prior_batches", class_samples)):
        order = state.get(name)
        if order is not None and count and any(i >= count for b in order["pending"] for i in b):
            raise EriDiffusionError(
                f"{state_path(path)} draws from more images than this run's {samples}: it was written for "
                "other training data; resume with that data, or start a new run."
            )


def restore(run, state, path):
    """Put TrainingRun `run` back where `state` (read beside the adapter at `path`) left it (its settings
    and data checked by the preflight)."""
    run.trained.load_optimizer_state(run.optimizer, state["optimizer"], shards_path(path))
    run.scheduler.load_state_dict(state["scheduler"])
    run.scaler.load_state_dict(state["scaler"])
    run.batches.load_state(state["batches"])
    if run.prior_batches is not None and state.get("prior_batches") is not None:
        run.prior_batches.load_state(state["prior_batches"])
    run.choice.setstate(state["choice"])
    run.noise_gen.set_state(state["noise"].to(run.noise_gen.get_state().device))
    progress = run.progress
    progress.start_step, progress.losses = state["step"], list(state["losses"])
    progress.eval_before = state["eval_loss_before"]
    # (states written before validation existed have none of it)
    progress.validation_points = [list(point) for point in state.get("validation", [])]
    progress.best, progress.checks_since_best = state.get("best"), state.get("checks_since_best", 0)
    if run.ema is not None:
        run.ema.load_state(state["ema"])
        with torch.no_grad():
            for parameter, trained in zip(run.trained.parameters(), state["trained_parameters"]):
                parameter.copy_(trained)
