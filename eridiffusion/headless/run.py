"""A training run from a RunConfig, in the order a graph of EriDiffusion's nodes runs: load the
model, LoadDataset, CacheLatents, SampleDuringTraining and TrainingObjective, LoRATrainer, SaveLoRA
and LossGraph; each step through that node, or through the core function it calls where the node
holds ComfyUI's page (its progress bar, its Stop button). In a run of several processes (torchrun)
every process loads the model, encodes its share of the dataset and trains; rank 0 alone decides the
run folder, writes files and talks to the terminal."""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import EriDiffusionError
from ..formats.atomic_file import writable_folder
from ..formats.lora_path import lora_path_for
from ..training.run.distributed import SINGLE_PROCESS, TrainingProcesses
from ..training.samples.sampler_settings import SamplerSettings
from .models import (
    check_model_files,
    load_audio_vae,
    load_clip_vision,
    load_low_noise_model,
    load_models,
    model_family,
)
from .run_config import RunConfig, config_yaml

if TYPE_CHECKING:  # the run's heavy modules are imported once the config-only checks passed
    from ..training.data.dataset import Dataset
    from ..training.model.families import Family
    from ..training.run.request import RunRequest


def use_output_folder(output):
    """ComfyUI's output folder for the run, and its loras/ (diffusion_models/: a full fine-tune's) as the folders
    SaveLoRA writes to."""
    import folder_paths

    writable_folder(output, "output folder")
    folder_paths.set_output_directory(output)
    for folder in ("loras", "diffusion_models"):
        folder_paths.add_model_folder_path(folder, os.path.join(output, folder), is_default=True)


@dataclass
class Inputs:
    """What the graph's first nodes hand on: the loaded model and its family, and the DATASET."""

    model: Any  # ComfyUI's MODEL (a ModelPatcher)
    clip: Any
    vae: Any
    family: Family
    dataset: Dataset
    validation_dataset: Dataset | None = None  # the config's second and third LoadDatasets, if any
    regularization_dataset: Dataset | None = None
    low_noise_model: Any = None  # two experts in one run (model.low_noise_model): the low-noise one's MODEL
    audio_vae: Any = None  # audio-video training (model.audio_vae): the audio VAE
    clip_vision: Any = None  # image-to-video's image encoder (model.clip_vision)


@contextlib.contextmanager
def refused_in(config: RunConfig, section=""):
    """A refusal raised inside names the config file and, where one section's values are refused, the section
    (the node checks them as it checks a graph's widgets, knowing no file)."""
    try:
        yield
    except EriDiffusionError as error:
        raise EriDiffusionError(f"{config.path}: {section + ': ' if section else ''}{error}") from None


def load_inputs(config: RunConfig) -> Inputs:
    """The datasets (LoadDataset) and the sample prompts' images, then the model: a dataset or a prompt
    line LoadDataset or SampleDuringTraining would refuse is named before any model file is read."""
    import torch

    from ..nodes.dataset_node import LoadDataset

    with torch.inference_mode():  # as ComfyUI's executor runs every node

        def dataset(values, section):
            with refused_in(config, section):
                return LoadDataset.execute(**values).result[0] if values is not None else None

        training = dataset(config.dataset, "dataset")
        validation = dataset(config.validation_dataset, "validation_dataset")
        regularization = dataset(config.regularization_dataset, "regularization_dataset")
        if config.sample is not None:  # the prompt lines' images, relative to the config file
            with refused_in(config, "sample"):
                SamplerSettings(**config.sample).prompt_specs(os.path.dirname(config.path))
        model, clip, vae = load_models(config.model)
        family = model_family(model, config.model)
        extra = [load(config.model) for load in (load_low_noise_model, load_audio_vae, load_clip_vision)]
    return Inputs(model, clip, vae, family, training, validation, regularization, *extra)


def cache_arguments(config, inputs):
    """build_training_data's arguments, as CacheLatents passes them (its node adds only the progress bar)."""
    from ..nodes.cache_node import default_cache_folder
    from ..training.data.training_data import CacheSettings

    return dict(
        dataset=inputs.dataset,
        vae=inputs.vae,
        clip=inputs.clip,
        resolution=config.cache["resolution"],
        cache_folder=config.cache["cache_folder"].strip() or default_cache_folder(),
        shuffle_variants=config.cache["shuffle_variants"],
        validation_dataset=inputs.validation_dataset,
        regularization_dataset=inputs.regularization_dataset,
        start_image=config.cache["start_image"],
        audio_vae=inputs.audio_vae,
        clip_vision=inputs.clip_vision,
        extra_resolutions=CacheSettings(**config.cache).extras(),
        edit_instructions=config.cache["edit_instructions"],
        inpaint=config.cache["inpaint"],
    )


def cache_latents(config, inputs, progress=None, processes=SINGLE_PROCESS):
    """CacheLatents' work, shared among the processes."""
    import torch

    from ..training.data.training_data import build_training_data

    with torch.inference_mode():
        return build_training_data(**cache_arguments(config, inputs), progress=progress, processes=processes)


def sample_settings(config, inputs):
    """SampleDuringTraining's SAMPLE_CONFIG of the `sample` section; relative image paths in its
    prompt lines are the config file's."""
    if config.sample is None:
        return None
    import torch

    from ..training.samples.config import sample_config

    with torch.inference_mode():
        return sample_config(
            inputs.clip,
            inputs.vae,
            SamplerSettings(**config.sample),
            os.path.dirname(config.path),
            audio_vae=inputs.audio_vae,
        )


def train_config(config):
    """The TrainConfig LoRATrainer builds from these inputs (and TrainingObjective's, if connected)."""
    from ..training.run.config import train_config_from

    return train_config_from(config.train, [config.objective] if config.objective is not None else [])


def newest_checkpoint(output, run_name):
    """The checkpoint of run `run_name` (its folder or a later _2, _3 ...) furthest on, with its
    training state: where `--resume auto` continues. Its step is read from its name
    (<run>_step<N>); of equal steps, the state written last wins. (By time alone, a copied or
    touched folder sent a run back to an earlier checkpoint.)"""
    folders = re.compile(re.escape(run_name) + r"(_\d+)?")
    found = []
    if os.path.isdir(output):
        for entry in os.scandir(output):
            checkpoints = os.path.join(entry.path, "checkpoints")
            if entry.is_dir() and folders.fullmatch(entry.name) and os.path.isdir(checkpoints):
                for name in os.listdir(checkpoints):
                    state = os.path.join(checkpoints, name[: -len(".safetensors")] + ".training_state")
                    step = re.search(r"_step(\d+)\.safetensors$", name)
                    if step and os.path.isfile(state):
                        found.append((int(step.group(1)), os.path.getmtime(state), os.path.join(checkpoints, name)))
    if not found:
        raise EriDiffusionError(
            f"--resume auto: run '{run_name}' has no checkpoint with its training state in "
            f"{output}; run without --resume to start it."
        )
    return max(found)[2]


def resume_point(resume, output, settings, processes=SINGLE_PROCESS):
    """LoadLoRAForTraining's RESUME for --resume auto (the run's newest checkpoint, as rank 0 finds
    it) or a path, read before anything loads (the preflight checks it with the run)."""
    if not resume:
        return None
    from ..nodes.resume_node import LoadLoRAForTraining

    if resume == "auto":
        path = processes.decided_by_main(lambda: newest_checkpoint(output, settings.run_name))
    else:
        path = resume
    return LoadLoRAForTraining.execute(path=path).result[0]


def requested_run(config: RunConfig, resume, output, processes=SINGLE_PROCESS) -> tuple[RunRequest, Inputs]:
    """(the RunRequest LoRATrainer would get from this config's graph, its data described and not yet
    encoded, the Inputs), checked by the preflight: what `train` and `--dry-run` both ask first. What
    the config alone can tell (checked_settings) is asked before ComfyUI's models are imported, the
    datasets before any model loads."""
    settings, point = checked_settings(config, resume, output, processes)
    import torch

    from ..training.data.training_data import training_data_facts
    from ..training.run.preflight import SETTINGS_CHECKS, preflight
    from ..training.run.request import RunRequest

    with refused_in(config):
        preflight(RunRequest(None, None, settings, resume=point, processes=processes), SETTINGS_CHECKS)  # no model
    inputs = load_inputs(config)
    samples = sample_settings(config, inputs)
    with torch.inference_mode(), refused_in(config, "cache"):
        facts = training_data_facts(**cache_arguments(config, inputs))
    request = RunRequest(inputs.model, facts, settings, inputs.clip, point, samples, processes, inputs.low_noise_model)
    with refused_in(config):
        preflight(request)
    return request, inputs


def checked_settings(config: RunConfig, resume, output, processes=SINGLE_PROCESS):
    """(the run's TrainConfig, its resume point): the settings, the resume point (--resume auto with
    nothing to resume), the save target and the model files' headers checked, the first refusal
    raised, without importing ComfyUI's models: a refused config is named at once."""
    settings = train_config(config)
    point = resume_point(resume, output, settings, processes)
    check_save_target(config)
    if not config.model.tiny:
        check_model_files(config.model)
    return settings, point


def check_save_target(config):
    """SaveLoRA's filename_prefix, checked before any work (SaveLoRA runs after training) in the folder it
    writes to: loras/, or diffusion_models/ for a full fine-tune."""
    import folder_paths

    from ..training.adapters.attach import FULL

    folder = "diffusion_models" if config.train["algorithm"] == FULL else "loras"
    prefix, loras = config.save["filename_prefix"], folder_paths.get_folder_paths(folder)[0]
    names = [prefix]
    if config.model.low_noise_model:  # two experts: a file each
        from ..training.run.experts import EXPERTS

        names = [f"{prefix}_{expert}" for expert in EXPERTS]
    with refused_in(config, "save"):
        for name in names:
            lora_path_for(name, loras, config.save["overwrite"])


def save_outputs(config, result):
    """SaveLoRA and LossGraph on the trained LORA and LOSS; the saved file's path (two experts: a
    SaveLoRA each, <filename_prefix>_high_noise and _low_noise, and the first's path)."""
    import torch

    from ..nodes.loss_graph_node import LossGraph
    from ..nodes.save_node import SaveLoRA
    from ..training.run.experts import EXPERTS
    from ..training.run.loss_plot import LossHistory

    history = LossHistory.of(result)
    saves = [(result.lora, config.save)]
    if result.low_noise is not None:
        prefix = config.save["filename_prefix"]
        saves = [
            (lora, {**config.save, "filename_prefix": f"{prefix}_{name}"})
            for lora, name in zip((result.lora, result.low_noise.lora), EXPERTS)
        ]
    with torch.inference_mode():
        paths = [SaveLoRA.execute(lora, **values).result[0] for lora, values in saves]
        LossGraph.execute(history)
    return paths[0]


def _resuming_line(point):
    if not point.state:
        return f"resuming from {point.path} (its weights; no training state beside it)"
    seen = point.state.get("samples_seen")
    processes = point.state.get("world_size", 1)
    return f"resuming from {point.path} at step {point.state['step']}" + (
        f" ({seen} samples seen, by {processes} process{'es' if processes > 1 else ''})" if seen is not None else ""
    )


def train_from_config(
    config: RunConfig, resume: str | None = None, processes: TrainingProcesses = SINGLE_PROCESS
) -> bool:
    """Run the whole config (as one of `processes`); True when Ctrl-C ended it early (after it saved)."""
    import folder_paths

    from . import terminal

    main = processes.is_main
    say = terminal.say if main else (lambda line: None)
    if config.logging["tensorboard"]:
        terminal.tensorboard_writer_class()  # missing: fail before any work
    output = folder_paths.get_output_directory()
    started = time.monotonic()
    request, inputs = requested_run(config, resume, output, processes)
    import comfy.model_management

    from ..training.run.run_folder import unique_run_dir
    from ..training.run.summary import validation_summary

    settings, point = request.config, request.resume
    device = comfy.model_management.get_torch_device()
    where = f"in {processes.world_size} processes (rank 0 on {device})" if processes.distributed else f"on {device}"
    say(f"model {config.model.describe()}: {inputs.family.name} {where}")
    progress, bar = terminal.caching_progress(len(inputs.dataset.records)) if main else (None, None)
    request = request.with_data(cache_latents(config, inputs, progress, processes))
    if bar is not None:
        bar.close()
    if point is not None:
        say(_resuming_line(point))
    run_dir = processes.decided_by_main(lambda: unique_run_dir(output, settings.run_name))
    if main:
        with open(os.path.join(run_dir, "config.yaml"), "w", encoding="utf-8") as f:
            f.write(config_yaml(config))
    result, stop = _trained(config, request, run_dir)
    if not main:
        return len(result.losses) < settings.steps and stop.requested
    lora_path = save_outputs(config, result)
    stopped = len(result.losses) < settings.steps
    terminal.say(
        f"{'stopped at' if stopped else 'trained'} step {len(result.losses)} of {settings.steps} in "
        f"{time.monotonic() - started:.0f} s ({result.seconds_per_step:.3g} s/step); evaluation loss "
        f"{result.eval_loss_before:.4g} -> {result.eval_loss_after:.4g}{validation_summary(result)}"
    )
    terminal.say(f"run folder {os.path.relpath(run_dir)}; LoRA {os.path.relpath(lora_path)}")
    return stopped and stop.requested


def _trained(config, request, run_dir):
    """(LoRATrainer's TrainResult, the Ctrl-C handler): the training itself, with the terminal's progress."""
    import torch

    from ..training.run.trainer import TrainingHooks, train_run
    from . import terminal

    main, settings, point = request.processes.is_main, request.config, request.resume
    start = point.state["step"] if point is not None and point.state else 0
    with terminal.CtrlC(announce=main) as stop:
        progress = None
        if main:
            progress = terminal.TrainingProgress(settings.steps, start, run_dir, stop, config.logging["tensorboard"])
        hooks = progress.hooks() if progress is not None else TrainingHooks(should_stop=lambda: stop.requested)
        result = None
        try:
            with torch.inference_mode(False), torch.enable_grad():  # as LoRATrainer's execute
                result = train_run(request, run_dir, hooks)
        finally:
            if progress is not None:
                progress.close(result)
    return result, stop
