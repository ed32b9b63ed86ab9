"""Issue 14's features as users reach them, through ComfyUI's executor (which runs every node under
torch.inference_mode): validation, EMA, masks, prior preservation, where the adapter learns."""

import json
import os

import pytest
import safetensors.torch
import torch

from devkit.workflow import execution_error, load_extension, run_training


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


def test_ema_through_the_executor_saves_the_average_and_the_trained_weights_beside_it(
    registered, dogs, comfy_dirs, caplog
):
    import logging

    import nodes

    from devkit.tiny_models import build_tiny

    outcome = run_training(
        dogs, "ema_node", trainer={"steps": 4, "ema_decay": 0.5}, save={"filename_prefix": "ema/dog", "dtype": "fp32"}
    )
    assert outcome.success, outcome.error
    averaged = tensors(os.path.join(comfy_dirs["loras"], "ema", "dog.safetensors"))
    trained = tensors(os.path.join(comfy_dirs["loras"], "ema", "dog_raw.safetensors"))
    assert averaged.keys() == trained.keys() and not same_tensors(averaged, trained)
    model, clip, _ = build_tiny("sd15", seed=0)
    for name in ("ema/dog.safetensors", "ema/dog_raw.safetensors"):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            nodes.LoraLoader().load_lora(model, clip, name, 1.0, 1.0)
        assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]


def test_masks_flip_and_mask_min_through_the_executor(registered, datasets_dir, tmp_path):
    from devkit.photo_masks import copy_photos, half_black_masks

    folder = copy_photos(datasets_dir, str(tmp_path / "masked"))
    half_black_masks(folder, names=("00",))
    refused = run_training(folder, "masked_refused", trainer={"steps": 1})
    assert not refused.success and "01.jpg has no mask" in refused.error
    outcome = run_training(
        folder,
        "masked_node",
        trainer={"steps": 2, "mask_min": 0.1},
        dataset_options={"missing_mask": "weight 1", "flip": True},
    )
    assert outcome.success, outcome.error
    assert read_json(outcome, "summary.json")["config"]["mask_min"] == 0.1


def test_regularization_images_and_output_preservation_through_the_executor(registered, dogs, datasets_dir):
    import folder_paths

    from devkit.workflow import QUICK, run_prompt, training_prompt, widget_defaults

    settings = {
        **QUICK,
        "steps": 2,
        "run_name": "preserved",
        "preservation_prompt": "a photo of dog",
        "preservation_every": 2,
    }
    prompt = training_prompt(dogs, settings, resolution=64, train_text_encoder=True)  # (links the CLIP)
    prompt["9"] = {
        "class_type": "EriDiffusion_LoadDataset",
        "inputs": {
            **widget_defaults("EriDiffusion_LoadDataset"),
            "folder": os.path.join(datasets_dir, "dreambooth_cat"),
        },
    }
    prompt["3"]["inputs"]["regularization_dataset"] = ["9", 0]
    executor, _ = run_prompt(prompt)
    assert executor.success, execution_error(executor)
    with open(os.path.join(folder_paths.get_output_directory(), "preserved", "summary.json")) as f:
        summary = json.load(f)
    assert summary["steps"] == 2 and summary["config"]["preservation_prompt"] == "a photo of dog"
    assert summary["config"]["preservation_every"] == 2


def test_layer_selection_block_rates_and_timestep_range_through_the_executor(registered, dogs, comfy_dirs):
    outcome = run_training(
        dogs,
        "selected_node",
        trainer={
            "steps": 2,
            "include": "attn2",
            "exclude": "output_blocks",
            "block_lr": "input:0.5,middle:2",
            "timestep_min": 0.2,
            "timestep_max": 0.6,
        },
        save={"filename_prefix": "selected/dog", "dtype": "fp32"},
    )
    assert outcome.success, outcome.error
    with safetensors.safe_open(os.path.join(comfy_dirs["loras"], "selected", "dog.safetensors"), "pt") as f:
        modules = json.loads(f.metadata()["eridiffusion_modules"])
    assert modules and all("attn2" in m and "output_blocks" not in m for m in modules)
    config = read_json(outcome, "summary.json")["config"]
    assert (config["block_lr"], config["objective"]["timestep_min"], config["objective"]["timestep_max"]) == (
        "input:0.5,middle:2",
        0.2,
        0.6,
    )
    refused = run_training(dogs, "selected_refused", trainer={"steps": 1, "include": "no_such_layer"})
    assert not refused.success and "their names look like diffusion_model." in refused.error
