"""A training run from a RunConfig, in the order a graph of EriDiffusion's nodes runs: load the
model, LoadDataset, CacheLatents, SampleDuringTraining and TrainingObjective, LoRATrainer, SaveLoRA
and LossGraph; each step through that node, or through the core function it calls where the node
holds ComfyUI's page (its progress bar, its Stop button). In a run of several processes (torchrun)
every process loads the model, encodes its share of the dataset and trains; rank 0 alone decides the
run folder, writes files and talks to the terminal."""

import os
import re
import time
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import EriDiffusionError
from ..formats.atomic_file import writable_folder
from ..training.data.cache_checks import check_datasets_apart
from ..training.data.dataset import Dataset
from ..training.model.families import Family
from ..training.run.distributed import SINGLE_PROCESS, TrainingProcesses
from ..training.run.experts import check_expert_pair
from ..training.run.preflight import (
    check_flux_input_layout,
    check_inpaint_fits,
    check_masks,
    check_references_read,
    check_resume_point,
    check_run,
    check_samples_read,
    check_settings_fit_data,
    masks_of_records,
)
from ..training.run.resume import check_resume_fits
from ..training.samples.config import sample_config
from ..training.samples.render import SamplerSettings
from . import terminal
from .models import load_audio_vae, load_clip_vision, load_low_noise_model, load_models, model_family
from .run_config import RunConfig, config_yaml


def use_output_folder(output):
    """ComfyUI's output folder for the run, and its loras/ as the folder SaveLoRA writes to."""
    import folder_paths

    writable_folder(output, "output folder")
    folder_paths.set_output_directory(output)
    folder_paths.add_model_folder_path("loras", os.path.join(output, "loras"), is_default=True)


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


def load_inputs(config: RunConfig) -> Inputs:
    """The datasets (LoadDataset), checked against the run's settings, and the sample prompts' images,
    then the model: a mistake in the data or the settings is named before any model file is read."""
    from ..nodes.dataset_node import LoadDataset

    with torch.inference_mode():  # as ComfyUI's executor runs every node

        def dataset(values):
            return LoadDataset.execute(**values).result[0] if values is not None else None

        training = LoadDataset.execute(**config.dataset).result[0]
        validation, regularization = dataset(config.validation_dataset), dataset(config.regularization_dataset)
        check_datasets(config, training, validation, regularization)
        if config.sample is not None:  # the prompt lines' images, relative to the config file
            SamplerSettings(**config.sample).prompt_specs(os.path.dirname(config.path))
        model, clip, vae = load_models(config.model)
        family = model_family(model, config.model)
        extra = [load(config.model) for load in (load_low_noise_model, load_audio_vae, load_clip_vision)]
    return Inputs(model, clip, vae, family, training, validation, regularization, *extra)


def check_datasets(config, training, validation, regularization):
    """What the datasets tell of the run before anything is encoded (and what --dry-run reports)."""
    settings = train_config(config)
    check_datasets_apart(training, validation, regularization)
    has_validation = bool(training.held_out) or validation is not None
    check_settings_fit_data(settings, has_validation, regularization is not None)
    check_masks(*masks_of_records(training), settings.mask_min)


def cache_latents(config, inputs, progress=None, processes=SINGLE_PROCESS):
    """CacheLatents' work (its node adds only ComfyUI's progress bar), shared among the processes."""
    from ..nodes.cache_node import default_cache_folder
    from ..training.data.training_data import CacheSettings, build_training_data

    folder = config.cache["cache_folder"].strip() or default_cache_folder()
    with torch.inference_mode():
        return build_training_data(
            inputs.dataset,
            inputs.vae,
            inputs.clip,
            config.cache["resolution"],
            folder,
            shuffle_variants=config.cache["shuffle_variants"],
            progress=progress,
            processes=processes,
            validation_dataset=inputs.validation_dataset,
            regularization_dataset=inputs.regularization_dataset,
            start_image=config.cache["start_image"],
            audio_vae=inputs.audio_vae,
            clip_vision=inputs.clip_vision,
            extra_resolutions=CacheSettings(**config.cache).extras(),
            edit_instructions=config.cache["edit_instructions"],
            inpaint=config.cache["inpaint"],
        )


def sample_settings(config, inputs):
    """SampleDuringTraining's SAMPLE_CONFIG of the `sample` section; relative image paths in its
    prompt lines are the config file's."""
    if config.sample is None:
        return None
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
    from ..nodes import trainer_node
    from ..nodes.setting_inputs import SettingValues

    connected = [SettingValues(config.objective)] if config.objective is not None else []
    return trainer_node.train_config(config.train, connected)


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
    it) or a path, checked against the run's TrainConfig `settings` before anything loads."""
    if not resume:
        return None
    from ..nodes.resume_node import LoadLoRAForTraining

    if resume == "auto":
        path = processes.decided_by_main(lambda: newest_checkpoint(output, settings.run_name))
    else:
        path = resume
    point = LoadLoRAForTraining.execute(path=path).result[0]
    check_resume_point(point, settings, processes.world_size)
    return point


def checked_inputs(config, resume, output, processes=SINGLE_PROCESS):
    """(the ResumePoint or None, the Inputs) of a run, with every check that needs no image encoded
    made: what `train` and `--dry-run` both ask first. The resume point and the save target are
    checked before any model loads, the datasets before the model, the resume point's fit and the
    sample size, the input layout, CacheLatents' inpaint and the edit references against the loaded model."""
    settings = train_config(config)
    point = resume_point(resume, output, settings, processes)
    check_save_target(config)
    inputs = load_inputs(config)
    check_resume_fits(point, inputs.model, inputs.clip, settings)
    if inputs.low_noise_model is not None:
        check_expert_pair(inputs.model, inputs.low_noise_model)
    for model in [inputs.model] + ([inputs.low_noise_model] if inputs.low_noise_model is not None else []):
        check_flux_input_layout(model.model)  # (the graph's trainer checks these after CacheLatents)
        check_inpaint_fits(model.model, config.cache["inpaint"])
        check_references_read(model.model, any(record.references for record in inputs.dataset.records))
    if config.sample is not None:
        SamplerSettings(**config.sample).check_sizes(inputs.vae, os.path.dirname(config.path))
    return point, inputs


def check_save_target(config):
    """SaveLoRA's filename_prefix, checked before any work (SaveLoRA runs after training)."""
    import folder_paths

    from ..nodes.save_node import lora_path_for

    prefix, loras = config.save["filename_prefix"], folder_paths.get_folder_paths("loras")[0]
    from ..training.run.experts import EXPERTS

    for name in [f"{prefix}_{expert}" for expert in EXPERTS] if config.model.low_noise_model else [prefix]:
        lora_path_for(name, loras, config.save["overwrite"])


def save_outputs(config, result):
    """SaveLoRA and LossGraph on the trained LORA and LOSS; the saved file's path (two experts: a
    SaveLoRA each, <filename_prefix>_high_noise and _low_noise, and the first's path)."""
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
    import comfy.model_management
    import folder_paths

    from ..training.run.run_folder import unique_run_dir
    from ..training.run.summary import validation_summary

    main = processes.is_main
    say = terminal.say if main else (lambda line: None)
    if config.logging["tensorboard"]:
        terminal.tensorboard_writer_class()  # missing: fail before any work
    output = folder_paths.get_output_directory()
    started = time.monotonic()
    settings = train_config(config)
    point, inputs = checked_inputs(config, resume, output, processes)
    samples = sample_settings(config, inputs)
    for model in [inputs.model] + ([inputs.low_noise_model] if inputs.low_noise_model is not None else []):
        check_samples_read(model.model, samples)  # before any image is encoded
    device = comfy.model_management.get_torch_device()
    where = f"in {processes.world_size} processes (rank 0 on {device})" if processes.distributed else f"on {device}"
    say(f"model {config.model.describe()}: {inputs.family.name} {where}")
    progress, bar = terminal.caching_progress(len(inputs.dataset.records)) if main else (None, None)
    data = cache_latents(config, inputs, progress, processes)
    if bar is not None:
        bar.close()
    check_run(data, settings, inputs.clip, point, processes)  # before the run's folder is made
    if point is not None:
        say(_resuming_line(point))
    run_dir = processes.decided_by_main(lambda: unique_run_dir(output, settings.run_name))
    if main:
        with open(os.path.join(run_dir, "config.yaml"), "w", encoding="utf-8") as f:
            f.write(config_yaml(config))
    result, stop = _trained(config, inputs, data, settings, point, samples, run_dir, processes)
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


def _trained(config, inputs, data, settings, point, samples, run_dir, processes):
    """(LoRATrainer's TrainResult, the Ctrl-C handler): the training itself, with the terminal's progress."""
    from ..training.run.trainer import TrainingHooks, train_lora

    main = processes.is_main
    start = point.state["step"] if point is not None and point.state else 0
    with terminal.CtrlC(announce=main) as stop:
        progress = None
        if main:
            progress = terminal.TrainingProgress(settings.steps, start, run_dir, stop, config.logging["tensorboard"])
        hooks = progress.hooks() if progress is not None else TrainingHooks(should_stop=lambda: stop.requested)
        result = None
        try:
            with torch.inference_mode(False), torch.enable_grad():  # as LoRATrainer's execute
                result = train_lora(
                    inputs.model,
                    data,
                    settings,
                    run_dir,
                    sample_settings=samples,
                    hooks=hooks,
                    clip=inputs.clip,
                    resume=point,
                    processes=processes,
                    low_noise_model=inputs.low_noise_model,
                )
        finally:
            if progress is not None:
                progress.close(result)
    return result, stop
