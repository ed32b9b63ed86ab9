"""Issue 11, severe 3: a diverged run never finishes as a success. A non-finite loss or gradient
stops the run at that step with the likely cause, or (on_nan=skip) that step's update is left out;
checkpoints are only written from finite adapters, and SaveLoRA refuses NaN tensors."""

import json
import os
import re

import pytest
import safetensors.torch
import torch

from devkit.workflow import run_training

pytestmark = pytest.mark.one_host("the loop's handling of non-finite values")

DIVERGING = {"steps": 30, "learning_rate": 1.0, "dtype": "fp16", "save_every": 2, "rank": 16, "alpha": 16.0}
CAUSE = (
    "Likely cause: learning_rate 1 is high for AdamW (LoRA usually trains at 1e-4 to 1e-3); dtype fp16 "
    "overflows easily: use bf16 or fp32."
)


def all_finite(path):
    return all(bool(torch.isfinite(t).all()) for t in safetensors.torch.load_file(path).values())


def test_a_diverged_run_stops_at_the_step_naming_the_likely_cause(registered, photos, comfy_dirs):
    outcome = run_training(photos(2), "diverged_stop", trainer=DIVERGING, save={"filename_prefix": "diverged/stop"})
    assert not outcome.success
    match = re.fullmatch(
        r"EriDiffusion_LoRATrainer: training stopped at step (\d+) of 30: the loss is nan\. "
        + re.escape(CAUSE)
        + r" The last finite checkpoint is (\S+)\. "
        r"Set on_nan to skip to leave such steps out instead\.",
        outcome.error,
    )
    assert match, outcome.error
    step, checkpoint = int(match.group(1)), match.group(2)
    losses = outcome.losses()
    assert losses.index(None) + 1 == step and None not in losses[: step - 1]
    adapters = [f for f in outcome.checkpoints() if f.endswith(".safetensors")]
    assert checkpoint == os.path.join(outcome.run_dir, "checkpoints", adapters[-1])
    assert len(adapters) == (step - 1) // 2 and all(
        all_finite(os.path.join(outcome.run_dir, "checkpoints", f)) for f in adapters
    )
    assert not os.path.exists(os.path.join(comfy_dirs["loras"], "diverged"))  # SaveLoRA never ran


def test_skip_mode_still_stops_a_run_that_stays_diverged(registered, photos, comfy_dirs):
    outcome = run_training(
        photos(2), "diverged_skip", trainer={**DIVERGING, "on_nan": "skip"}, save={"filename_prefix": "diverged/skip"}
    )
    assert not outcome.success
    match = re.fullmatch(
        r"EriDiffusion_LoRATrainer: training diverged: 10 steps in a row were non-finite up to step "
        r"(\d+) of 30, and on_nan=skip only leaves out single bad steps\. "
        + re.escape(CAUSE)
        + r" The last finite checkpoint is (\S+)\.",
        outcome.error,
    )
    assert match, outcome.error
    losses = outcome.losses()
    assert losses[-10:] == [None] * 10 and len(losses) == int(match.group(1))
    adapters = [f for f in outcome.checkpoints() if f.endswith(".safetensors")]
    assert adapters and all(all_finite(os.path.join(outcome.run_dir, "checkpoints", f)) for f in adapters)
    assert not os.path.exists(os.path.join(comfy_dirs["loras"], "diverged"))


@pytest.fixture(scope="module")
def one_nan_latent(dog_dataset, tmp_path_factory):
    """A tiny SD1.5 and 4 training samples, the third with a NaN latent (what a caller that builds
    TrainingData itself could hand the core)."""
    from devkit.tiny_models import build_tiny
    from eridiffusion.training.data.training_data import build_training_data

    model, clip, vae = build_tiny("sd15", seed=0)
    with torch.inference_mode():
        data = build_training_data(dog_dataset, vae, clip, 64, str(tmp_path_factory.mktemp("nan_cache")))
    data.samples = data.samples[:4]
    with torch.inference_mode(False):
        data.samples[2].latent = torch.full_like(data.samples[2].latent, float("nan"))
    return model, data


@pytest.mark.parametrize("optimizer", ["AdamW", "Adafactor"])  # a fused optimizer skips on the device, others not
def test_skip_mode_leaves_out_each_bad_step_and_counts_it(optimizer, one_nan_latent, tmp_path):
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.run.build import TrainingRun
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.trainer import TrainingHooks, train, train_lora

    model, data = one_nan_latent
    config = TrainConfig(
        gradient_checkpointing=False,
        steps=12,
        learning_rate=3e-3,
        optimizer=optimizer,
        dtype="fp32",
        log_every=4,
        on_nan="skip",
        run_name="skips",
        adapter=AdapterSpec(rank=4, alpha=4.0, targets="all-linear"),
    )
    with torch.inference_mode(False):
        result = train_lora(model, data, config, str(tmp_path / "skipped"))
        run = TrainingRun(model, data, config, str(tmp_path / "counted"))
        try:
            train(run, None, TrainingHooks())
            updates = [state["step"] for state in run.optimizer.state.values()]
        finally:
            run.release()
    skipped = [i + 1 for i, loss in enumerate(result.losses) if loss != loss]
    assert 2 <= len(skipped) <= 5 and result.skipped_steps == len(skipped)
    assert {int(step) for step in updates} == {12 - len(skipped)}  # the optimizer never took those steps
    assert all(bool(torch.isfinite(t).all()) for t in result.lora.tensors.values())
    with open(os.path.join(result.run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["skipped_steps"] == len(skipped)
    with open(os.path.join(result.run_dir, "loss.json")) as f:
        assert [i + 1 for i, loss in enumerate(json.load(f)["loss"]) if loss is None] == skipped


def test_stop_mode_names_the_data_when_the_first_step_fails(one_nan_latent, tmp_path):
    from eridiffusion.errors import EriDiffusionError
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.trainer import train_lora

    model, data = one_nan_latent
    only_nan = type(data)(data.samples[2:3], data.empty_conditioning, 0.0, 1, 64, "nan")
    config = TrainConfig(
        gradient_checkpointing=False,
        steps=4,
        learning_rate=1e-4,
        dtype="fp32",
        log_every=4,
        run_name="first_step",
        adapter=AdapterSpec(rank=4, alpha=4.0, targets="all-linear"),
    )
    with torch.inference_mode(False), pytest.raises(EriDiffusionError) as raised:
        train_lora(model, only_nan, config, str(tmp_path))
    assert str(raised.value) == (
        "training stopped at step 1 of 4: the loss is nan. Likely cause: the data or the starting weights (the run's "
        "first step already failed: a NaN in a latent, a caption's encoding or a resumed LoRA). No checkpoint was "
        "written before it (save_every writes them). Set on_nan to skip to leave such steps out instead."
    )


def lora_with(value):
    from eridiffusion.formats.lora_file import TrainedLoRA

    up = torch.ones(4, 2)
    up[0, 0] = value
    return TrainedLoRA(
        {
            "lora_unet_x.lora_up.weight": up,
            "lora_unet_x.lora_down.weight": torch.ones(2, 4),
            "lora_unet_x.alpha": torch.tensor(2.0),
        },
        {"architecture": "SD15"},
    )


@pytest.mark.parametrize(
    "value, dtype, problem",
    [
        (
            float("nan"),
            "fp32",
            "1 of this LoRA's 3 tensors (e.g. lora_unet_x.lora_up.weight) hold NaN or infinite values, "
            "so the run that made it diverged. Train again with a lower learning_rate (or dtype "
            "bf16/fp32).",
        ),
        (
            1e6,
            "fp16",
            "in fp16, 1 of its 3 tensors (e.g. lora_unet_x.lora_up.weight) hold values too large for fp16, "
            "which become infinite; save as bf16 or fp32.",
        ),
    ],
    ids=["nan", "fp16 overflow"],
)
def test_save_lora_refuses_non_finite_tensors_and_writes_nothing(value, dtype, problem, comfy_dirs):
    from eridiffusion.errors import EriDiffusionError
    from eridiffusion.nodes.save_node import SaveLoRA

    path = os.path.join(comfy_dirs["loras"], "non_finite", f"{dtype}.safetensors")
    with pytest.raises(EriDiffusionError) as raised:
        SaveLoRA.execute(lora_with(value), filename_prefix=f"non_finite/{dtype}", dtype=dtype, overwrite=False)
    assert str(raised.value) == f"{path} was not written: {problem}"
    assert not os.path.exists(os.path.dirname(path))
