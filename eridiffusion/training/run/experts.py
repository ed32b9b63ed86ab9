"""Two experts trained in one run (Wan 2.2 14B: a high-noise and a low-noise model, handed over at a
noise level): a TrainingRun of each (its own clone, adapters, optimizer and noise range), and which
one trains each step."""

import dataclasses
import warnings

import torch

from ...errors import EriDiffusionError
from ..model import loading as model_loading
from ..model.families import family_of, resolve_objective
from ..model.forward import token_count
from ..model.objective import sample_fractions
from ..trained import TrainedBuilder, trained_adapters
from .build import TrainingRun
from .distributed import SINGLE_PROCESS

EXPERTS = ("high_noise", "low_noise")  # the order of a two-expert run's TrainingRuns, and their file names


def check_one_model(config):
    """Refuse the two-expert settings in a run of one model: they would be ignored."""
    if config.expert_boundary or config.switch_boundary_every:
        raise EriDiffusionError(
            "expert_boundary and switch_boundary_every are for two experts in one run: connect LoRATrainer's "
            "low_noise_model (headless: model.low_noise_model), or set them to 0."
        )


def check_experts(config, validating, clip, resume, processes):
    """What a two-expert run refuses, before anything is built (`validating`: the data has validation images)."""
    refused = (
        (resume is not None, "continuing from a RESUME (start it afresh, or train one expert with its file)"),
        (config.text_encoder_lr > 0 and clip is not None, "text-encoder training (set text_encoder_lr to 0)"),
        (validating, "validation images (drop LoadDataset's validation fraction and folder)"),
        (processes.distributed, "several GPUs (run it on one)"),
    )
    for refused_here, what in refused:
        if refused_here:
            raise EriDiffusionError(f"LoRATrainer's low_noise_model (two experts in one run) does not take {what}.")


def check_expert_pair(high_model, low_model):
    """The two MODELs of a two-expert run are two experts of one architecture (Wan 2.2 14B's high- and
    low-noise files): the same MODEL twice, or models of other classes or shapes, are refused by name."""
    if low_model.model is high_model.model:
        raise EriDiffusionError(
            "the same MODEL is connected to LoRATrainer's model and low_noise_model: load the low-noise expert's "
            "own file (…_low_noise_14B…) with a second loader and connect that to low_noise_model."
        )
    (high_class, high), (low_class, low) = (_layout(model) for model in (high_model, low_model))
    if (high_class, high) != (low_class, low):
        differ = ", ".join(sorted(key for key in high.keys() | low.keys() if high.get(key) != low.get(key)))
        what = f"{high_class} and {low_class}" if high_class != low_class else f"{high_class}s differing in {differ}"
        raise EriDiffusionError(
            f"model and low_noise_model are two experts of one architecture (Wan 2.2 14B's high- and low-noise files), "
            f"but ComfyUI loaded {what}: connect the high-noise expert to model and the low-noise one of the same "
            "release to low_noise_model."
        )


def _layout(patcher):
    """(the model config's class name, its unet_config's numbers and names: not its dtype or operations)."""
    config = patcher.model.model_config
    plain = (bool, int, float, str, tuple, list)
    return type(config).__name__, {key: value for key, value in config.unet_config.items() if isinstance(value, plain)}


def expert_boundary(config, family):
    """The σ where the high-noise expert hands over: the config's, else the family's (check_expert_boundary passed)."""
    return config.expert_boundary or family.expert_boundary


def check_expert_boundary(config, family):
    """A boundary to hand over at, inside the trained noise range."""
    boundary = expert_boundary(config, family)
    if not boundary:
        raise EriDiffusionError(
            f"{family.name} has no expert boundary of its own: set TrainingObjective's expert_boundary (the noise "
            "level where the high-noise model hands over to the low-noise one) to train two experts."
        )
    objective = config.objective
    if not objective.timestep_min + 0.01 <= boundary <= objective.timestep_max - 0.01:
        raise EriDiffusionError(
            f"expert_boundary {boundary:g} is outside the trained noise range {objective.timestep_min:g}-"
            f"{objective.timestep_max:g} (timestep_min, timestep_max): each expert needs a part of it."
        )


def expert_config(config, index, boundary):
    """The TrainConfig of expert `index` (EXPERTS): the high-noise one's noise range from `boundary`
    up, the low-noise one's below it; its checkpoints named <run_name>_high_noise / _low_noise."""
    objective = config.objective
    low, high = (boundary, objective.timestep_max) if index == 0 else (objective.timestep_min, boundary)
    return dataclasses.replace(
        config,
        run_name=f"{config.run_name}_{EXPERTS[index]}",
        objective=dataclasses.replace(objective, timestep_min=low, timestep_max=high),
    )


class ExpertPick:
    """Which expert trains each step: with `switch_every` N, N steps each in turn, the high-noise one
    first (ai-toolkit's switch_boundary_every); else the one whose range holds a noise level drawn as
    the run draws them (`spec`, the whole range), from a CPU generator of its own (no device sync).
    Either way an expert then draws its batch's noise levels in its own range only."""

    def __init__(self, spec, boundary, switch_every, seed, tokens):
        self.spec, self.boundary, self.switch_every, self.tokens = spec, boundary, switch_every, tokens
        self.generator = torch.Generator().manual_seed(seed + 4)
        self.trained = []  # the expert each step trained, in step order

    def __call__(self, step):
        if self.switch_every:
            index = (step // self.switch_every) % 2
        else:
            index = 0 if float(sample_fractions(self.spec, 1, self.generator, self.tokens)[0]) >= self.boundary else 1
        self.trained.append(index)
        return index


def expert_runs(
    high_model,
    low_model,
    data,
    config,
    run_dir,
    clip=None,
    processes=SINGLE_PROCESS,
    trained: TrainedBuilder = trained_adapters,
) -> tuple[tuple[TrainingRun, ...], ExpertPick]:
    """(the two experts' TrainingRuns, high-noise first, each training what `trained` builds; their ExpertPick)."""
    family = family_of(high_model.model)
    boundary = expert_boundary(config, family)
    runs = tuple(
        TrainingRun(
            model, data, expert_config(config, index, boundary), run_dir, clip, processes=processes, trained=trained
        )
        for index, model in enumerate((high_model, low_model))
    )
    for run in runs:  # each expert's evaluation loss: on its own noise range
        run.evaluation_range = (run.config.objective.timestep_min, run.config.objective.timestep_max)
    tokens = token_count(data.samples[0].latent[None], runs[0].base.diffusion_model, family.latent_patch)
    spec = resolve_objective(config.objective, family)
    return runs, ExpertPick(spec, boundary, config.switch_boundary_every, config.seed, tokens)


class ExpertSteps:
    """The optimizer step of a two-expert run: that of the expert `pick` names (`steps`, their
    OptimizerSteps). The other's learning-rate schedule steps too, so both follow the run's step."""

    def __init__(self, runs, steps, pick):
        self.runs, self.steps, self.pick = runs, steps, pick

    @property
    def first_started(self):
        """When the run's first step began (summary.json's setup time ends there)."""
        return min((step.first_started for step in self.steps if step.first_started is not None), default=None)

    @property
    def first_seconds(self):
        """The seconds of each expert's first step together (each captures its graphs or compiles)."""
        return sum(step.first_seconds or 0.0 for step in self.steps)

    def __call__(self, step):
        index = self.pick(step)
        run = self.runs[index]
        # where the two do not fit the GPU together, ComfyUI unloads one to load the other (else a no-op)
        model_loading.load(run.patcher, run.config.weights_vram_gib)
        self.steps[index](step)
        with warnings.catch_warnings():  # (torch warns of a schedule stepped before its optimizer)
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
            for other, run in enumerate(self.runs):
                if other != index:
                    run.scheduler.step()


def expert_summary(result, pick):
    """summary.json's `experts` of a two-expert run's TrainResult: the boundary, and each expert's
    steps and evaluation losses (each on its own noise range)."""
    summary = {"boundary": pick.boundary}
    for index, (name, each) in enumerate(zip(EXPERTS, (result, result.low_noise))):
        summary[name] = {
            "steps": pick.trained.count(index),
            "eval_loss_before": each.eval_loss_before,
            "eval_loss_after": each.eval_loss_after,
        }
    return summary
