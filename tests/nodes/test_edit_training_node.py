"""Multi-reference edit LoRAs as users train them: through ComfyUI's executor, a folder of targets
with control/, control_2/ (and control_3/) references trains a tiny Qwen-Image-Edit (three
references) or Flux.2 (two) stack, the samples render with the references their prompt lines name,
and the saved LoRA loads in stock LoraLoader with no unmatched key."""

import json
import logging
import os

import numpy as np
import pytest
from PIL import Image

from devkit import tiny_family_node
from devkit.edit_pairs import REFERENCE_FOLDERS, make_edit_pairs
from devkit.tiny_models import TINY_FAMILIES, build_tiny, family_params
from devkit.workflow import QUICK, Outcome, load_extension, run_prompt, training_prompt, widget_defaults

STACKS = {"qwen_image_edit": 3, "flux2": 2}


@pytest.fixture(scope="module")
def registered():
    mappings = load_extension()
    tiny_family_node.register()
    return mappings


def _refs(folder, stem, count):
    return " ".join(f"--ref {os.path.join(folder, where, stem + '.png')}" for where in REFERENCE_FOLDERS[:count])


@pytest.mark.parametrize("name", family_params(sorted(STACKS)))
def test_an_edit_stack_trains_on_multi_reference_pairs_through_the_executor(
    name, registered, datasets_dir, tmp_path, caplog
):
    import folder_paths
    import nodes

    count, tiny = STACKS[name], TINY_FAMILIES[name]
    folder = make_edit_pairs(
        os.path.join(datasets_dir, "dreambooth_dog"), str(tmp_path / "pairs"), ("00", "01", "02", "03"), count
    )
    run_name = f"edit_node_{name}"
    settings = {**QUICK, "steps": tiny.steps, "rank": 8, "alpha": 8.0, "targets": "all-linear", "run_name": run_name}
    stack = {"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": name, "seed": 0}}
    prompt = training_prompt(
        folder, settings, save={"filename_prefix": f"{run_name}/lora"}, stack=stack, resolution=tiny.resolution
    )
    sampler = {**widget_defaults("EriDiffusion_SampleDuringTraining"), "clip": ["1", 1], "vae": ["1", 2]}
    lines = [f"colorize the photo of sks dog --seed 5 {_refs(folder, stem, count)}" for stem in ("00", "01")]
    sampler.update(prompts="\n".join(lines), width=96, height=64, steps=2, cfg=1.0, every=10_000)
    prompt["10"] = {"class_type": "EriDiffusion_SampleDuringTraining", "inputs": sampler}
    prompt["4"]["inputs"]["sample_config"] = ["10", 0]
    executor, _ = run_prompt(prompt)
    outcome = Outcome(executor, os.path.join(folder_paths.get_output_directory(), run_name))
    assert outcome.success, outcome.error
    with open(os.path.join(outcome.run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["eval_loss_after"] < 0.7 * summary["eval_loss_before"], summary
    samples = os.path.join(outcome.run_dir, "samples")
    first, second = (
        np.asarray(Image.open(os.path.join(samples, f"step_{tiny.steps}_{k}.png")), dtype=np.int16) for k in (0, 1)
    )
    assert first.shape == (64, 96, 3)
    assert np.abs(first - second).max() > 0  # one seed, one prompt: only the references differ
    model, clip, _ = build_tiny(name, seed=0)
    with caplog.at_level(logging.WARNING):
        nodes.LoraLoader().load_lora(model, clip, f"{run_name}/lora.safetensors", 1.0, 0.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]


@pytest.mark.parametrize("name", family_params(["qwen_image_edit"]))
def test_a_control_less_edit_trains_on_instructions_alone_through_the_executor(name, registered, datasets_dir):
    import folder_paths

    tiny = TINY_FAMILIES[name]
    run_name = "edit_node_instructions_only"
    settings = {**QUICK, "steps": tiny.steps, "rank": 8, "alpha": 8.0, "targets": "all-linear", "run_name": run_name}
    stack = {"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": name, "seed": 0}}
    prompt = training_prompt(
        os.path.join(datasets_dir, "dreambooth_dog"), settings, stack=stack, resolution=tiny.resolution
    )
    prompt["3"]["inputs"]["edit_instructions"] = True
    executor, _ = run_prompt(prompt)
    outcome = Outcome(executor, os.path.join(folder_paths.get_output_directory(), run_name))
    assert outcome.success, outcome.error
    with open(os.path.join(outcome.run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["eval_loss_after"] < 0.7 * summary["eval_loss_before"], summary
