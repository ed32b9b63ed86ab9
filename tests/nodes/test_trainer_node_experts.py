"""LoRATrainer with its low_noise_model connected trains Wan 2.2 14B's two experts in one run the way
users run it, through ComfyUI's executor: two MODEL and two LORA outputs, each LoRA saved by its own
SaveLoRA (…_high_noise, …_low_noise) and loaded by stock LoraLoaderModelOnly with no unmatched key."""

import json
import logging
import os

import pytest
import torch

from devkit import tiny_family_node
from devkit.photo_clips import CLIP_FRAMES
from devkit.stock_comfyui import ProbeInput, relative_error
from devkit.tiny_models import TINY_FAMILIES, build_tiny
from devkit.workflow import QUICK, load_extension, run_prompt, set_training_settings, training_prompt

FAMILY = "wan21_t2v"


@pytest.fixture(scope="module")
def registered():
    mappings = load_extension()
    tiny_family_node.register()
    return mappings


def _prompt(dog_clips, settings, filename_prefix):
    """The training prompt of the tiny Wan stack (seed 0: the high-noise expert) on the photo clips."""
    return training_prompt(
        dog_clips.folder,
        settings,
        resolution=TINY_FAMILIES[FAMILY].resolution,
        save={"filename_prefix": filename_prefix},
        stack={"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": FAMILY, "seed": 0}},
        dataset_options={"frames": CLIP_FRAMES, "fps": 16.0},
    )


def test_two_experts_train_through_the_executor_into_two_loras_that_stock_comfyui_loads(registered, dog_clips, caplog):
    import folder_paths
    import nodes

    from eridiffusion.training.data.training_data import build_training_data

    tiny = TINY_FAMILIES[FAMILY]
    settings = {**QUICK, "steps": 300, "rank": 8, "alpha": 8.0, "targets": "all-linear", "run_name": "node_experts"}
    prompt = _prompt(dog_clips, settings, "node_experts/lora_high_noise")
    prompt["30"] = {"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": FAMILY, "seed": 1}}
    prompt["31"] = {**prompt["5"], "inputs": {**prompt["5"]["inputs"], "lora": ["4", 6]}}
    prompt["31"]["inputs"]["filename_prefix"] = "node_experts/lora_low_noise"
    set_training_settings(prompt, {"low_noise_model": ["30", 0]})  # on TrainingObjective (added as node 32)
    executor, _ = run_prompt(prompt)
    assert executor.success
    with open(os.path.join(folder_paths.get_output_directory(), "node_experts", "summary.json")) as f:
        experts = json.load(f)["experts"]
    for name in ("high_noise", "low_noise"):
        assert experts[name]["eval_loss_after"] < 0.7 * experts[name]["eval_loss_before"], experts
    for seed, name in ((0, "high_noise"), (1, "low_noise")):
        model, clip, vae = build_tiny(FAMILY, seed=seed)
        with caplog.at_level(logging.WARNING):
            caplog.clear()
            (patched,) = nodes.LoraLoaderModelOnly().load_lora_model_only(
                model, f"node_experts/lora_{name}.safetensors", 1.0
            )
        assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]
        with torch.inference_mode():
            data = build_training_data(
                dog_clips,
                vae,
                clip,
                tiny.resolution,
                os.path.join(folder_paths.get_output_directory(), "node_experts", "probe"),
            )
        probe = ProbeInput.of(model, data)
        assert relative_error(probe.output(patched), probe.output(model)) > 1e-2


def test_the_same_model_as_both_experts_is_refused_through_the_executor_before_the_run_folder(registered, dog_clips):
    import folder_paths

    from devkit.workflow import execution_error

    prompt = _prompt(dog_clips, {**QUICK, "steps": 5, "run_name": "node_experts_same_model"}, "node_experts/same")
    set_training_settings(prompt, {"low_noise_model": ["1", 0]})  # the high-noise expert's MODEL again
    executor, _ = run_prompt(prompt)
    assert not executor.success
    message = execution_error(executor)
    assert message.startswith("EriDiffusion_LoRATrainer") and "the same MODEL is connected" in message, message
    assert not os.path.exists(os.path.join(folder_paths.get_output_directory(), "node_experts_same_model"))
