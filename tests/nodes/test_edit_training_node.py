"""Multi-reference edit LoRAs as users train them: through ComfyUI's executor, a folder of targets
with control/, control_2/ (and control_3/) references trains a tiny Qwen-Image-Edit (three
references) or Flux.2 (two) stack, the samples render with the references their prompt lines name,
and the saved LoRA loads in stock LoraLoader with no unmatched key."""

import logging
import os

import numpy as np
import pytest
from PIL import Image

from devkit import tiny_family_node
from devkit.edit_pairs import REFERENCE_FOLDERS, make_edit_pairs
from devkit.tiny_models import TINY_FAMILIES, build_tiny, family_params
from devkit.workflow import family_prompt, load_extension, run_named, with_sampler

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
    import nodes

    count, steps = STACKS[name], TINY_FAMILIES[name].steps
    photos = os.path.join(datasets_dir, "dreambooth_dog")
    folder = make_edit_pairs(photos, str(tmp_path / "pairs"), ("00", "01", "02", "03"), count)
    run_name = f"edit_node_{name}"
    lines = [f"colorize the photo of sks dog --seed 5 {_refs(folder, stem, count)}" for stem in ("00", "01")]
    prompt = with_sampler(
        family_prompt(name, folder, run_name),
        prompts="\n".join(lines),
        width=96,
        height=64,
        steps=2,
        cfg=1.0,
        every=10_000,
    )
    outcome = run_named(prompt, run_name)
    assert outcome.success, outcome.error
    summary = outcome.summary()
    assert summary["eval_loss_after"] < 0.7 * summary["eval_loss_before"], summary
    samples = os.path.join(outcome.run_dir, "samples")
    first, second = (np.asarray(Image.open(os.path.join(samples, f"step_{steps}_{k}.png")), np.int16) for k in (0, 1))
    assert first.shape == (64, 96, 3)
    assert np.abs(first - second).max() > 0  # one seed, one prompt: only the references differ
    model, clip, _ = build_tiny(name, seed=0)
    with caplog.at_level(logging.WARNING):
        nodes.LoraLoader().load_lora(model, clip, f"{run_name}/lora.safetensors", 1.0, 0.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]


@pytest.mark.parametrize("name", family_params(["qwen_image_edit"]))
def test_a_control_less_edit_trains_on_instructions_alone_through_the_executor(name, registered, datasets_dir):
    run_name = "edit_node_instructions_only"
    folder = os.path.join(datasets_dir, "dreambooth_dog")
    outcome = run_named(family_prompt(name, folder, run_name, cache_options={"edit_instructions": True}), run_name)
    assert outcome.success, outcome.error
    summary = outcome.summary()
    assert summary["eval_loss_after"] < 0.7 * summary["eval_loss_before"], summary
