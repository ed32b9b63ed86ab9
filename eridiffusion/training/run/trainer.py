"""The training loop, top to bottom: build the run (build.py), then one optimizer step after another
(optimizer_step.py), each followed by what is due (cadence.py): read the losses back, validate,
report, write a checkpoint, render samples, stop. Then the last checkpoint and the result.

Works on a ComfyUI ModelPatcher (and optionally its CLIP) and the TrainingData of CacheLatents.
The inputs are never changed: the results are clones of the inputs with the trained change
(trained/: the adapters) attached. In a run of several processes (distributed.py) each trains its
part of every global micro-batch, the gradients are averaged once per optimizer step, and rank 0
alone writes files.
"""

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from comfy.model_patcher import ModelPatcher

from ...formats.atomic_file import write_json_atomic
from ...formats.trained_file import TrainedFile
from ..data.training_data import TrainingData
from ..model import loading as model_loading
from ..model.forward import transformer_options_of
from ..model.prepared_data import conditioning_options
from ..samples.render import SampleSettings, render_samples
from ..speed.cuda_graphs import release_graph_memory
from ..speed.step_path import step_path
from ..trained import Trained
from . import checkpoints
from .build import TrainingRun
from .cadence import Cadence
from .config import TrainConfig
from .distributed import SINGLE_PROCESS, TrainingProcesses
from .evaluation import evaluation_loss
from .experts import ExpertPick, ExpertSteps, expert_runs, expert_summary
from .micro_batches import MicroBatches, loss_function, prepared
from .non_finite import MAX_SKIPS_IN_A_ROW, StepHealth, diverged_error
from .optimizer_step import OptimizerStep
from .preflight import preflight
from .request import RunRequest
from .resume import ResumePoint
from .summary import run_summary
from .validation import ValidationLoss


@dataclass
class TrainingHooks:
    """How a caller watches and steers a run; every hook is optional."""

    on_progress: Callable | None = None  # (step, total, new_losses or None, stats dict)
    check_cancel: Callable | None = None  # raises to stop the run (ComfyUI's cancel)
    should_stop: Callable | None = None  # True: end at this step boundary, save, return the result
    on_samples: Callable | None = None  # (step, grid IMAGE, paths)


@dataclass
class TrainResult:
    lora: TrainedFile  # the trained file's content: adapters' TrainedLoRA (ready for SaveLoRA), or another kind's
    losses: list[float]  # training loss per optimizer step
    eval_loss_before: float
    eval_loss_after: float
    seconds_per_step: float
    run_dir: str
    patcher: ModelPatcher | None = None  # a clone of the input MODEL with the trained change
    checkpoints: list[str] = field(default_factory=list)  # the periodic checkpoints' paths kept, oldest first
    samples: torch.Tensor | None = None
    trained: Trained | None = None  # what the run trained (applied to `patcher`)
    sample_paths: list[str] = field(default_factory=list)
    peak_memory_gib: float = 0.0
    clip: Any = None  # a clone of the input CLIP (ComfyUI's) with its trained change, if trained
    skipped_steps: int = 0  # on_nan=skip: steps whose update was left out (non-finite)
    peak_memory_gib_per_process: list[float] = field(default_factory=list)  # [rank 0's, rank 1's, ...]
    validation: list[list[float]] = field(default_factory=list)  # [[step, validation loss], ...]
    best: dict[str, Any] | None = None  # {"step", "loss", "path"} of the lowest validation loss
    stopped_early: bool = False  # early_stop_patience ended the run
    setup_seconds: float = 0.0  # from the run's start to its first step: building, evaluating, preparing data
    setup_phases: dict[str, float] = field(default_factory=dict)  # those seconds by phase (setup_clock.py)
    between_steps_phases: dict[str, float] = field(default_factory=dict)  # checkpoints', validation's seconds
    first_step_seconds: float = 0.0  # the first optimizer step, its CUDA graph capture or compile included
    low_noise: "TrainResult | None" = None  # a two-expert run (experts.py): the low-noise expert's (this: the high's)
    stream_losses: dict | None = None  # audio-video: {"video"/"audio": [evaluation loss before, after]}
    block_swap: dict | None = None  # vram_budget_gib, blocks_to_swap: where the blocks lived (BlockSwap.figures)


def train(
    runs: TrainingRun | tuple,
    sample_settings: SampleSettings | None = None,
    hooks: TrainingHooks | None = None,
    pick: ExpertPick | None = None,
) -> TrainResult:
    """Train TrainingRun `runs` (or a two-expert run's two, `pick` naming the one each step trains)
    from its progress to the last step (or a stop), rendering samples of `sample_settings`
    (SampleSettings or None) and reporting to `hooks`."""
    runs = runs if isinstance(runs, tuple) else (runs,)
    with _Loop(runs, sample_settings, hooks or TrainingHooks(), pick) as loop:
        run = loop.run
        config, progress, done = run.config, run.progress, run.progress.start_step
        for step in range(progress.start_step, config.steps):
            if loop.hooks.check_cancel is not None:
                loop.hooks.check_cancel()
            loop.optimizer_step(step)
            done = step + 1
            due = loop.cadence.after(done, loop.stop_asked(done))
            new, point = None, None
            if due.log:
                new = loop.read_losses(done)
            if due.validation:
                point = loop.validate(done)
                due = loop.cadence.after_validation(due, progress.checks_since_best)
            loop.report(done, new, point)
            if due.checkpoint:
                loop.save_checkpoints(done)
            if due.samples:
                loop.render_samples(done)
            if due.stop:
                loop.stopped_early = due.early_stop
                break
        return loop.finish(done)


class _Loop:
    """What one call of train() keeps beside the runs: the step and its paths, validation, the samples
    rendered, the timing and the losses not yet read back. `run` is the first of `runs`: it keeps the
    losses and the schedule a two-expert run reports."""

    def __init__(self, runs, sample_settings, hooks, pick=None):
        self.runs, self.run, self.sample_settings, self.hooks, self.pick = runs, runs[0], sample_settings, hooks, pick
        run, config, progress = self.run, self.run.config, self.run.progress
        for each in runs:
            if each.progress.eval_before is None and not self._before_at_the_end(each):
                each.progress.eval_before = self._evaluation_loss(each)
        self.streams_before = self._stream_losses(run) if progress.start_step == 0 else None
        run.setup.mark("evaluation_before", run.device)
        self.health = StepHealth(config.steps, run.device, config.on_nan, run.scaler.is_enabled())
        self.paths = []
        steps = [self._optimizer_step(each) for each in runs]
        self.optimizer_step = steps[0] if pick is None else ExpertSteps(runs, steps, pick)
        self.validation: ValidationLoss | None = None
        if run.data.validation is not None:
            options = conditioning_options(config, run.family)
            self.validation = ValidationLoss(
                run.base, run.data.validation, run.device, run.objective, config, options, run.text_encoder
            )
        every = sample_settings.every if sample_settings is not None else None
        self.cadence = Cadence(config, every, validating=self.validation is not None)
        self.samples, self.sample_paths, self.stopped_early = None, [], False
        if run.device.type == "cuda":
            if run.block_swap is not None:  # (the budget's plan measures the memory the first step reserves)
                torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(run.device)
        self.started, self.timed_from, self.logged = time.perf_counter(), None, progress.start_step

    def _optimizer_step(self, run):
        """The OptimizerStep of TrainingRun `run`, along its step path (kept in `paths`)."""
        model_loading.load(run.patcher, run.config.weights_vram_gib)
        run.setup.mark("weights_loaded", run.device)
        training = prepared(run, run.data, run.preservation)
        prior = prepared(run, run.data.regularization) if run.data.regularization is not None else None
        run.setup.mark("data_prepared", run.device)
        self.transformer_options = transformer_options_of(run.patcher)
        loss_of = loss_function(run, self.transformer_options)
        path = step_path(
            run.config, run.device, run.trained, loss_of, run.base.diffusion_model, run.fp8_products, run.block_swap
        )
        self.paths.append(path)
        run.setup.mark("step_path", run.device)
        return OptimizerStep(run, path, MicroBatches(run, training, prior), self.health)

    @staticmethod
    def _before_at_the_end(run):
        """Whether TrainingRun `run`'s evaluation loss before training is measured at its end, with the
        trained change bypassed, rather than before its first step (so the first step comes seconds
        sooner: 64 forwards of full-size SDXL took 3 of the 10 s before it, issue 44). The same model
        either way where training starts from the base itself: fresh adapters (and a model's own weights'
        copies) start as the identity, and the bypass computes without them. Not where it starts from a
        file's weights or trains the text encoder (whose encodings the bypass does not reach)."""
        fresh = run.starts_from_base or run.progress.start_step > 0  # (a resumed run of such a start)
        return fresh and run.text_encoder is None

    @staticmethod
    def _evaluation_loss(run):
        return evaluation_loss(
            run.patcher, run.data, run.config, text_encoder=run.text_encoder, noise_range=run.evaluation_range
        )

    @staticmethod
    def _stream_losses(run):
        """An audio-video run's evaluation loss of each stream (the video's, the audio's), else None."""
        if all(sample.audio_latent is None for sample in run.data.samples):
            return None
        config, encoder = run.config, run.text_encoder
        return [evaluation_loss(run.patcher, run.data, config, text_encoder=encoder, stream=k) for k in (0, 1)]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for path in self.paths:
            path.release()  # (a failed run too: its graphs and fp8 weights go now)
        for run in self.runs:  # the checkpoint being written finishes, also when the run stops on an error
            run.writes.close(failing=exc[0] is not None)

    def stop_asked(self, done):
        """Whether the caller asked to stop before the last step (all processes stop at one step: a
        Ctrl-C reaches each)."""
        should_stop, steps = self.hooks.should_stop, self.run.config.steps
        return self.run.processes.any(should_stop is not None and done < steps and should_stop())

    def read_losses(self, done):
        """The losses of the steps since the last read (the one device sync of a logging step), kept
        and logged; a non-finite one stops the run (on_nan=stop) or counts as skipped (on_nan=skip)."""
        run = self.run
        new, norms = self.health.read(self.logged, done)
        run.progress.losses += new
        checkpoints.write_loss_log(run)
        self._check_finite(new, norms)
        self.logged = done
        if self.timed_from is None:
            self.timed_from = (done, time.perf_counter())
        return new

    def _check_finite(self, losses, norms):
        run, health, start = self.run, self.health, self.logged
        config, first = run.config, run.progress.start_step + 1
        checkpoint = run.progress.checkpoints[-1] if run.progress.checkpoints else None
        if config.on_nan == "stop":
            bad = health.bad_steps(start, losses, norms)
            if bad:
                raise diverged_error(*bad[0], config, first, checkpoint)
            return
        bad = health.count(start, losses, norms)
        if health.bad_in_a_row >= MAX_SKIPS_IN_A_ROW:
            raise diverged_error(*bad[-1], config, first, checkpoint, skipped_in_a_row=health.bad_in_a_row)

    def validate(self, done):
        """The validation loss after `done` steps (its one read-back), recorded (checkpoints.py)."""
        assert self.validation is not None  # (cadence: validation is due only with validation images)
        self.run.between_steps.restart(self.run.device)
        with checkpoints.averaged(self.run):
            value = float(self.validation(self.run.patcher, self.transformer_options))
        self.run.between_steps.mark("validation_loss")
        point = checkpoints.record_validation(self.run, done, value)
        checkpoints.write_loss_log(self.run)
        return point

    def report(self, done, new, point):
        if self.hooks.on_progress is None:
            return
        run = self.run
        stats = {"lr": run.scheduler.get_last_lr()[0]}
        if point is not None:
            stats["validation"] = [point]
        if run.device.type == "cuda":  # allocator bookkeeping: no device sync
            stats["peak_vram_gib"] = torch.cuda.max_memory_allocated(run.device) / 2**30
        self.hooks.on_progress(done, run.config.steps, new, stats)

    def save_checkpoints(self, done):
        for run in self.runs:
            checkpoints.save_checkpoint(run, done)

    def render_samples(self, done):
        """Rank 0 renders the samples (on the EMA weights, if kept; two experts: each on its noise
        range, as the Wan 2.2 workflows sample); the others wait."""
        run = self.run
        low_noise = (self.runs[1].patcher, self.pick.boundary) if self.pick is not None else None
        if run.processes.is_main:
            with contextlib.ExitStack() as rendering:
                for each, path in zip(self.runs, self.paths):
                    rendering.enter_context(checkpoints.averaged(each))
                    rendering.enter_context(path.sampling(each.patcher))
                folder = os.path.join(run.run_dir, "samples")
                self.samples, paths = render_samples(run.patcher, self.sample_settings, done, folder, low_noise)
            self.sample_paths += paths
            if self.hooks.on_samples is not None:
                self.hooks.on_samples(done, self.samples, paths)
        run.processes.barrier()

    def finish(self, done):
        """The last checkpoints, what was trained and the run's figures, after `done` steps."""
        run = self.run
        finished = time.perf_counter()
        if self.timed_from is not None and done > self.timed_from[0]:
            seconds_per_step = (finished - self.timed_from[1]) / (done - self.timed_from[0])
        else:
            seconds_per_step = (finished - self.started) / max(1, done - run.progress.start_step)
        peak = torch.cuda.max_memory_allocated(run.device) / 2**30 if run.device.type == "cuda" else 0.0
        # the steps' CUDA graphs go before the evaluations, which run eagerly: a budget's plan holds the graphs'
        # memory or an eager step's, not both (Flux.2-dev at 24 GiB: 5.9 GiB of graph pools and the evaluation)
        for path in self.paths:
            path.release()
        release_graph_memory()
        if run.device.type == "cuda":
            torch.cuda.empty_cache()
        results = [self._result(each, done, seconds_per_step, peak, finished) for each in self.runs]
        if self.streams_before is not None:
            after = self._stream_losses(run)
            results[0].stream_losses = {n: [b, a] for n, b, a in zip(("video", "audio"), self.streams_before, after)}
        if len(results) > 1:
            results[0].low_noise = results[1]
        return results[0]

    def _result(self, run, done, seconds_per_step, peak, finished):
        """TrainingRun `run`'s last checkpoint and TrainResult (the losses, the setup's and the first
        step's seconds: the whole run's)."""
        if run.progress.eval_before is None:  # (_before_at_the_end)
            with run.trained.bypassed():
                run.progress.eval_before = self._evaluation_loss(run)
        checkpoints.save_checkpoint(run, done)
        lora = checkpoints.lora_of(run, done)
        if run.ema is not None:
            run.ema.copy_to_parameters()  # the run's result (MODEL, evaluation) is the averaged weights
        run.trained.requires_grad_(False)
        block_swap = run.block_swap.figures() if run.block_swap is not None else None
        eval_after = self._evaluation_loss(run)
        progress, first = run.progress, self.optimizer_step
        return TrainResult(
            lora=lora,
            losses=self.run.progress.losses,
            eval_loss_before=progress.eval_before,
            eval_loss_after=eval_after,
            seconds_per_step=seconds_per_step,
            run_dir=run.run_dir,
            checkpoints=list(progress.checkpoints),
            samples=self.samples,
            trained=run.trained,
            sample_paths=self.sample_paths,
            peak_memory_gib=peak,
            skipped_steps=self.health.skipped,
            peak_memory_gib_per_process=run.processes.gather(peak),
            validation=list(progress.validation_points),
            best=dict(progress.best) if progress.best else None,
            stopped_early=self.stopped_early,
            setup_seconds=(first.first_started or finished) - self.run.started,
            first_step_seconds=first.first_seconds or 0.0,
            setup_phases=dict(run.setup.phases),
            between_steps_phases=run.between_steps.phases,  # (the last write's seconds join it as it ends)
            block_swap=block_swap,
        )


def train_lora(
    model_patcher: Any,
    data: TrainingData,
    config: TrainConfig,
    run_dir: str,
    sample_settings: SampleSettings | None = None,
    hooks: TrainingHooks | None = None,
    clip: Any = None,
    resume: ResumePoint | None = None,
    processes: TrainingProcesses = SINGLE_PROCESS,
    low_noise_model: Any = None,
) -> TrainResult:
    """Check (preflight.py), train, save checkpoints to run_dir, and return the trained MODEL (and CLIP)
    clones and LoRA. `processes`: this process's place in a run of several (distributed.join_processes).
    `low_noise_model`: a two-expert run (experts.py), `model_patcher` the high-noise expert; the
    result's `low_noise` holds the low-noise one's."""
    request = RunRequest(model_patcher, data, config, clip, resume, sample_settings, processes, low_noise_model)
    preflight(request)
    return train_run(request, run_dir, hooks)


def train_run(request: RunRequest, run_dir: str, hooks: TrainingHooks | None = None) -> TrainResult:
    """Train the RunRequest `request`, which preflight.py has checked, writing its files to `run_dir`."""
    data, config, clip, processes = request.training_data, request.config, request.clip, request.processes
    runs: tuple[TrainingRun, ...]
    if request.low_noise_model is None:
        run = TrainingRun(request.model, data, config, run_dir, clip, request.resume, processes, request.builder)
        runs, pick = (run,), None
    else:
        runs, pick = expert_runs(
            request.model, request.low_noise_model, data, config, run_dir, clip, processes, request.builder
        )
    try:
        result = train(runs, request.samples, hooks, pick)
    finally:
        for run in runs:
            run.release()
    for run, each in zip(runs, (result, result.low_noise)):
        assert each is not None  # (a second run: a second result)
        each.patcher = run.source.clone()
        run.trained.apply_to(each.patcher)
    result.clip = runs[0].trained.result_clip()
    if processes.is_main:
        summary = run_summary(result, config)
        if pick is not None:
            summary["experts"] = expert_summary(result, pick)
        write_json_atomic(os.path.join(run_dir, "summary.json"), summary)
    return result
