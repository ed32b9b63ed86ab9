"""Fill / inpaint LoRAs as users train them: through ComfyUI's executor, a tiny FLUX.1 Fill stack
(ComfyUI's FluxInpaint) trains on photos with masks/ and CacheLatents' inpaint on; a sample prompt
with --image and --mask fills the white region and keeps the source image outside it; the LoRA loads
in stock LoraLoader with no unmatched key."""

import json
import logging
import os

import numpy as np
import pytest
from PIL import Image

from devkit import tiny_family_node
from devkit.photo_masks import copy_photos, half_black_masks
from devkit.tiny_models import TINY_FAMILIES, build_tiny, family_params
from devkit.workflow import QUICK, Outcome, load_extension, run_prompt, training_prompt, widget_defaults
from eridiffusion.training.run.sample_inputs import image_tensor

PHOTOS = ("00", "01", "02", "03")
SIZE = (96, 64)  # the sample's width, height


@pytest.fixture(scope="module")
def registered():
    mappings = load_extension()
    tiny_family_node.register()
    return mappings


@pytest.mark.parametrize("name", family_params(["flux_fill"]))
def test_a_fill_model_trains_through_the_executor_and_its_samples_keep_the_source_outside_the_mask(
    name, registered, datasets_dir, tmp_path, caplog
):
    import folder_paths
    import nodes

    tiny = TINY_FAMILIES[name]
    folder = copy_photos(datasets_dir, str(tmp_path / "photos"), PHOTOS)
    half_black_masks(folder, PHOTOS)
    run_name = "fill_node"
    settings = {**QUICK, "steps": tiny.steps, "rank": 8, "alpha": 8.0, "targets": "all-linear", "run_name": run_name}
    stack = {"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": name, "seed": 0}}
    prompt = training_prompt(
        folder, settings, save={"filename_prefix": f"{run_name}/lora"}, stack=stack, resolution=tiny.resolution
    )
    prompt["3"]["inputs"]["inpaint"] = True
    image, mask = os.path.join(folder, "00.jpg"), os.path.join(folder, "masks", "00.png")
    sampler = {**widget_defaults("EriDiffusion_SampleDuringTraining"), "clip": ["1", 1], "vae": ["1", 2]}
    sampler.update(prompts=f"a photo of sks dog --image {image} --mask {mask}", width=SIZE[0], height=SIZE[1])
    sampler.update(steps=2, cfg=1.0, every=10_000)
    prompt["10"] = {"class_type": "EriDiffusion_SampleDuringTraining", "inputs": sampler}
    prompt["4"]["inputs"]["sample_config"] = ["10", 0]
    executor, _ = run_prompt(prompt)
    outcome = Outcome(executor, os.path.join(folder_paths.get_output_directory(), run_name))
    assert outcome.success, outcome.error
    with open(os.path.join(outcome.run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["eval_loss_after"] < 0.7 * summary["eval_loss_before"], summary

    rendered = np.asarray(Image.open(os.path.join(outcome.run_dir, "samples", f"step_{tiny.steps}_0.png")), np.int16)
    source = np.round(image_tensor(image, SIZE)[0].numpy() * 255).astype(np.int16)
    left, right = slice(0, SIZE[0] // 2 - 1), slice(SIZE[0] // 2 + 1, SIZE[0])  # black | white half
    assert rendered.shape == (SIZE[1], SIZE[0], 3)
    assert np.abs(rendered[:, left] - source[:, left]).max() <= 1  # outside the mask: the source image
    assert np.abs(rendered[:, right] - source[:, right]).mean() > 10  # inside: filled by the model

    model, clip, _ = build_tiny(name, seed=0)
    with caplog.at_level(logging.WARNING):
        nodes.LoraLoader().load_lora(model, clip, f"{run_name}/lora.safetensors", 1.0, 0.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]
