"""Fill / inpaint probed as users run it: a mask painted in colour is refused by name (it would count by
its brightness alone); CacheLatents' inpaint on a model without inpainting inputs is
named from the loaded model before any image is encoded headless, and in the graph (where only the trainer
sees the MODEL, after CacheLatents) before the run's folder is made; so is a sample setting the model ignores."""

import os

import pytest
from PIL import Image

from devkit.headless import CONFIGS, named_in, refused_train, write_yaml
from devkit.workflow import QUICK, run_named, run_training, training_prompt, with_sampler
from eridiffusion.training.data.dataset import load_dataset

TINY = os.path.join(CONFIGS, "tiny_demo.yaml")


@pytest.mark.parametrize("mode", [["--dry-run"], []], ids=["dry run", "train"])
def test_inpaint_on_a_model_without_inpainting_inputs_is_refused_before_any_image_is_encoded(
    mode, tmp_path, command_line
):
    config = write_yaml(tmp_path / "run.yaml", f"_base_: {TINY}\nmodel: tiny-sd15\ncache: {{inpaint: true}}\n")
    error, left = refused_train(config, tmp_path / "out", *mode, cwd=tmp_path, process=command_line)
    assert named_in(config, error) == (
        "CacheLatents' inpaint is on (masked images), but SD15 has no inpainting inputs to read them; turn inpaint "
        "off (masks/ then weigh the loss), or train an inpainting model (Flux Fill)."
    )
    assert left == []  # no latent cache, no run folder


def test_inpaint_on_a_model_without_inpainting_inputs_is_refused_in_the_graph_before_the_run_folder_is_made(
    registered, photos
):
    prompt = training_prompt(photos(1), {**QUICK, "run_name": "inpaint_unread"}, cache_options={"inpaint": True})
    outcome = run_named(prompt, "inpaint_unread")
    assert outcome.error == (
        "EriDiffusion_LoRATrainer: CacheLatents' inpaint is on (masked images), but SD15 has no inpainting inputs "
        "to read them; turn inpaint off (masks/ then weigh the loss), or train an inpainting model (Flux Fill)."
    )
    assert not os.path.exists(outcome.run_dir)  # no run folder, no workflow.json in it


def test_a_sample_guidance_the_model_ignores_is_refused_in_the_graph_before_the_run_folder_is_made(registered, photos):
    prompt = with_sampler(training_prompt(photos(1), {**QUICK, "run_name": "guidance_unread"}), prompts="a dog --g 3")
    outcome = run_named(prompt, "guidance_unread")
    assert outcome.error == (
        "EriDiffusion_LoRATrainer: SampleDuringTraining: prompt 'a dog' sets --g 3, but BaseModel has no guidance "
        "embedding; use --cfg for classifier-free guidance."
    )
    assert not os.path.exists(outcome.run_dir)


def _masks(folder, paint):
    (folder / "masks").mkdir()
    for image in sorted(folder.glob("*.jpg")):
        with Image.open(image) as opened:
            paint(opened.size).save(folder / "masks" / f"{image.stem}{'.jpg' if paint is _grey_jpeg else '.png'}")


def _red_on_black(size):
    mask = Image.new("RGB", size, (0, 0, 0))
    mask.paste((255, 0, 0), (0, 0, size[0] // 2, size[1]))
    return mask


def _grey_jpeg(size):
    return Image.linear_gradient("L").resize(size).convert("RGB")  # saved as JPEG: slight tints


def test_a_mask_painted_in_colour_is_refused_through_the_executor_naming_it(registered, photos):
    folder = photos(1)
    _masks(folder, _red_on_black)
    outcome = run_training(folder, "colour_mask", cache_options={"inpaint": True})
    assert not outcome.success and not os.path.exists(outcome.run_dir)
    assert outcome.error == (
        f"EriDiffusion_LoadDataset: mask {folder / 'masks' / '00.png'} is in colour (50% of its pixels), but a mask "
        "is read as greyscale (white: learn or repaint, black: ignore, grey: in between), so a colour counts by its "
        "brightness alone; re-export it in greyscale."
    )


def test_a_grey_mask_saved_as_an_rgb_jpeg_is_still_read(photos):
    folder = photos(1)
    _masks(folder, _grey_jpeg)
    (record,) = load_dataset(str(folder)).records
    assert record.mask == str(folder / "masks" / "00.jpg") and 0.45 < record.mask_coverage < 0.55
