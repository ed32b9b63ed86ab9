"""Fill / inpaint LoRAs as users train them: through ComfyUI's executor, a tiny FLUX.1 Fill stack
(ComfyUI's FluxInpaint) trains on photos with masks/ and CacheLatents' inpaint on; a sample prompt
with --image and --mask fills the white region and keeps the source image outside it; the LoRA loads
in stock LoraLoader with no unmatched key."""

import logging
import os

import numpy as np
import pytest
from PIL import Image

from devkit import tiny_family_node
from devkit.photo_masks import copy_photos, half_black_masks
from devkit.tiny_models import TINY_FAMILIES, build_tiny, family_params
from devkit.workflow import family_prompt, load_extension, run_named, with_sampler
from eridiffusion.training.samples.inputs import image_tensor

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
    import nodes

    steps = TINY_FAMILIES[name].steps
    folder = copy_photos(datasets_dir, str(tmp_path / "photos"), PHOTOS)
    half_black_masks(folder, PHOTOS)
    run_name = "fill_node"
    image, mask = os.path.join(folder, "00.jpg"), os.path.join(folder, "masks", "00.png")
    prompt = with_sampler(
        family_prompt(name, folder, run_name, cache_options={"inpaint": True}),
        prompts=f"a photo of sks dog --image {image} --mask {mask}",
        width=SIZE[0],
        height=SIZE[1],
        steps=2,
        cfg=1.0,
        every=10_000,
    )
    outcome = run_named(prompt, run_name)
    assert outcome.success, outcome.error
    summary = outcome.summary()
    assert summary["eval_loss_after"] < 0.7 * summary["eval_loss_before"], summary

    rendered = np.asarray(Image.open(os.path.join(outcome.run_dir, "samples", f"step_{steps}_0.png")), np.int16)
    source = np.round(image_tensor(image, SIZE)[0].numpy() * 255).astype(np.int16)
    left, right = slice(0, SIZE[0] // 2 - 1), slice(SIZE[0] // 2 + 1, SIZE[0])  # black | white half
    assert rendered.shape == (SIZE[1], SIZE[0], 3)
    assert np.abs(rendered[:, left] - source[:, left]).max() <= 1  # outside the mask: the source image
    assert np.abs(rendered[:, right] - source[:, right]).mean() > 10  # inside: filled by the model

    model, clip, _ = build_tiny(name, seed=0)
    with caplog.at_level(logging.WARNING):
        nodes.LoraLoader().load_lora(model, clip, f"{run_name}/lora.safetensors", 1.0, 0.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]
