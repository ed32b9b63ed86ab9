"""Issue 14's features as users reach them, through ComfyUI's executor (which runs every node under
torch.inference_mode): validation, EMA, masks, prior preservation, where the adapter learns."""

import json
import os

import pytest
import safetensors.torch
import torch

from tests.support.workflow import load_extension, run_training


@pytest.fixture(scope="module")
def registered():
    return load_extension()


@pytest.fixture(scope="module")
def dogs(datasets_dir):
    return os.path.join(datasets_dir, "dreambooth_dog")


def read_json(outcome, name):
    with open(os.path.join(outcome.run_dir, name)) as f:
        return json.load(f)


def tensors(path):
    return safetensors.torch.load_file(path)


def same_tensors(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_validation_through_the_executor_keeps_the_checkpoint_of_the_lowest_loss_as_best(registered, dogs):
    outcome = run_training(
        dogs,
        "validated",
        trainer={"steps": 6, "validate_every": 2, "save_every": 2},
        dataset_options={"validation": 0.2},
    )
    assert outcome.success, outcome.error
    points = read_json(outcome, "loss.json")["validation"]
    assert [step for step, _ in points] == [2, 4, 6]
    best_step = min(points, key=lambda p: p[1])[0]
    folder = os.path.join(outcome.run_dir, "checkpoints")
    assert same_tensors(
        tensors(os.path.join(folder, "best.safetensors")),
        tensors(os.path.join(folder, f"validated_step{best_step:06d}.safetensors")),
    )
    summary = read_json(outcome, "summary.json")
    assert summary["best_step"] == best_step and summary["validation"] == points
