"""Validation: held-out images, a validation loss at fixed noise, the best checkpoint and early
stopping (tiny SD1.5 at 64 px on the DreamBooth dog photos)."""

import json
import os
import shutil

import pytest
import safetensors.torch
import torch

from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.model import loading as model_loading
from eridiffusion.training.model.forward import transformer_options_of
from eridiffusion.training.model.objective import Objective
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora
from eridiffusion.training.run.validation import ValidationLoss


@pytest.fixture
def tiny_with_validation(quality_stack):
    """Tiny SD1.5 and the dog photos at 64 px with one of the five held out."""
    model, _, _, data = quality_stack
    return model, data


def quick_config(**values):
    settings = dict(
        steps=4,
        learning_rate=3e-3,
        dtype="fp32",
        gradient_checkpointing=False,
        log_every=2,
        adapter=AdapterSpec(rank=4, alpha=4.0),
        run_name="validation",
    )
    return TrainConfig(**{**settings, **values})


def test_held_out_images_are_spread_over_the_names_and_never_trained_on(datasets_dir, tiny_with_validation, tmp_path):
    dataset = load_dataset(os.path.join(datasets_dir, "dreambooth_dog"), validation=0.4)
    assert [os.path.basename(r.path) for r in dataset.held_out] == ["01.jpg", "03.jpg"]
    assert [os.path.basename(r.path) for r in dataset.records] == ["00.jpg", "02.jpg", "04.jpg"]
    _, data = tiny_with_validation
    assert [os.path.basename(s.source) for s in data.validation.samples] == ["02.jpg"]
    assert "02.jpg" not in [os.path.basename(s.source) for s in data.samples]
    for ext in (".jpg", ".txt"):
        shutil.copy(os.path.join(datasets_dir, "dreambooth_dog", "00" + ext), tmp_path)
    with pytest.raises(EriDiffusionError, match="has 1 image.* leaves none to train on"):
        load_dataset(str(tmp_path), validation=0.1)


def test_a_validation_folder_adds_its_images_to_the_held_out_ones(datasets_dir, tmp_path):
    from devkit.tiny_models import build_tiny

    _, clip, vae = build_tiny("sd15", seed=0)
    dogs = load_dataset(os.path.join(datasets_dir, "dreambooth_dog"), validation=0.2)
    cats = load_dataset(os.path.join(datasets_dir, "dreambooth_cat"))
    with torch.inference_mode():
        data = build_training_data(dogs, vae, clip, 64, str(tmp_path), validation_dataset=cats)
    assert len(data.samples) == 4
    assert [os.path.relpath(s.source, datasets_dir) for s in data.validation.samples] == [
        "dreambooth_dog/02.jpg",
        *(f"dreambooth_cat/0{i}.jpg" for i in range(5)),
    ]


def test_two_validations_of_an_unchanged_adapter_give_equal_values(tiny_with_validation, tmp_path):
    model, data = tiny_with_validation
    config = quick_config(validate_every=2)
    with torch.inference_mode(False):
        result = train_lora(model, data, config, str(tmp_path))
        patcher = result.patcher
        model_loading.load(patcher, 0)
        validation = ValidationLoss(
            patcher.model, data.validation, patcher.load_device, Objective(patcher.model.model_sampling), config, {}
        )
        first, second = (float(validation(patcher, transformer_options_of(patcher))) for _ in range(2))
    assert first == second
    assert [step for step, _ in result.validation] == [2, 4]
    assert first == pytest.approx(result.validation[-1][1], rel=1e-5)  # the run's own check at step 4


class ScriptedValidation:
    """Stands in for ValidationLoss: the values of VALUES in turn."""

    VALUES = [1.0, 0.8, 0.9, 0.85, 0.7, 0.6]

    def __init__(self, *args, **kwargs):
        self.values = iter(self.VALUES)

    def __call__(self, patcher, transformer_options):
        return torch.tensor(next(self.values), dtype=torch.float64)


def test_early_stopping_ends_the_run_after_patience_checks_and_best_is_the_checkpoint_of_the_lowest(
    tiny_with_validation, tmp_path, monkeypatch
):
    import eridiffusion.training.run.trainer as trainer

    monkeypatch.setattr(trainer, "ValidationLoss", ScriptedValidation)
    model, data = tiny_with_validation
    config = quick_config(steps=20, validate_every=2, save_every=2, early_stop_patience=2)
    with torch.inference_mode(False):
        result = train_lora(model, data, config, str(tmp_path))
    # checks at 2, 4, 6, 8: the best is 0.8 at step 4, and 6 and 8 do not beat it
    assert len(result.losses) == 8 and result.stopped_early
    assert result.validation == [[2, 1.0], [4, 0.8], [6, 0.9], [8, 0.85]]
    assert result.best["step"] == 4
    folder = tmp_path / "checkpoints"
    best = safetensors.torch.load_file(folder / "best.safetensors")
    at_four = safetensors.torch.load_file(folder / "validation_step000004.safetensors")
    at_eight = safetensors.torch.load_file(folder / "validation_step000008.safetensors")
    assert best.keys() == at_four.keys() and all(torch.equal(best[k], at_four[k]) for k in best)
    assert not all(torch.equal(best[k], at_eight[k]) for k in best)
    with open(tmp_path / "summary.json") as f:
        summary = json.load(f)
    assert (summary["best_step"], summary["stopped_early"], summary["steps"]) == (4, True, 8)
    # what the checks and writes between the steps took, by phase, summed over the run: each check's loss, the best
    # file's copy and its write (at 2 and 4 only), each checkpoint's copies and its write (on the writer thread)
    phases = summary["between_steps_phases"]
    assert set(phases) == {
        "validation_loss",
        "best_export",
        "best_handed_over",
        "best_write",
        "checkpoint_export",
        "checkpoint_check",
        "checkpoint_state",
        "checkpoint_handed_over",
        "checkpoint_write",
    }
    assert all(seconds >= 0 for seconds in phases.values()) and phases["checkpoint_write"] > 0
    with open(tmp_path / "loss.json") as f:
        assert json.load(f)["validation"] == [[2, 1.0], [4, 0.8], [6, 0.9], [8, 0.85]]


def test_the_loss_plot_draws_the_validation_series_with_a_legend():
    import numpy as np

    from eridiffusion.training.run.loss_plot import VALIDATION_COLOR, draw_loss_plot

    pixels = np.asarray(draw_loss_plot([1.0, 0.9, 0.8, 0.7], validation=[(2, 0.95), (4, 0.85)]))
    orange = (pixels == np.array(VALIDATION_COLOR, dtype=np.uint8)).all(axis=-1).sum()
    without = np.asarray(draw_loss_plot([1.0, 0.9, 0.8, 0.7]))
    assert orange > 50 and (without == np.array(VALIDATION_COLOR, dtype=np.uint8)).all(axis=-1).sum() == 0
