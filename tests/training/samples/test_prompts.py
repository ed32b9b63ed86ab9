"""A sample prompt line's own settings (kohya's prompt-file flags) and the errors of bad lines."""

import os

import pytest

from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.samples.sampler_settings import SamplerSettings


def specs(text, folder="/nowhere"):
    return SamplerSettings(prompts=text).prompt_specs(folder)


def test_a_line_with_flags_has_its_own_negative_size_seed_cfg_steps_and_guidance():
    (spec,) = specs("a dog on a beach --n blurry, lowres --w 512 --h 768 --seed 42 --cfg 4.5 --steps 12 --g 3")
    assert (spec.text, spec.negative, spec.width, spec.height) == ("a dog on a beach", "blurry, lowres", 512, 768)
    assert (spec.seed, spec.cfg, spec.steps, spec.guidance) == (42, 4.5, 12, 3.0)


def test_kohyas_short_flags_mean_the_same_as_the_long_ones():
    (short,) = specs("a cat --d 5 --l 3 --s 9 --neg ugly")
    assert (short.seed, short.cfg, short.steps, short.negative) == (5, 3.0, 9, "ugly")


def test_a_line_without_flags_takes_the_nodes_settings():
    (spec,) = specs("a photo of sks dog")
    assert (spec.text, spec.negative, spec.width, spec.seed, spec.references) == (
        "a photo of sks dog",
        None,
        None,
        None,
        (),
    )


def test_references_are_read_relative_to_the_image_folder_in_order(datasets_dir):
    folder = os.path.join(datasets_dir, "dreambooth_dog")
    (spec,) = specs("make it a painting --ref 01.jpg --ref 00.jpg", folder)
    assert spec.references == (os.path.join(folder, "01.jpg"), os.path.join(folder, "00.jpg"))


@pytest.mark.parametrize(
    "line, message",
    [
        ("a dog --wdth 512", r"line 1: unknown flag --wdth; did you mean width\?"),
        ("a dog --w wide", r"line 1: --w must be a whole number, got 'wide'"),
        ("a dog --w 8", r"line 1: --w must be between 64 and 4096 \(got 8\)"),
        ("a dog --steps", r"line 1: --steps has no value"),
        ("--w 512", r"line 1 has flags but no prompt text"),
        ("a dog --ref missing.png", r"line 1: --ref: no image file /nowhere/missing.png"),
        ("a dog --g 500", r"line 1: --g must be between 0 and 100"),
        ("a dog --edit now", r"line 1: --edit takes no value \(got 'now'\)"),
    ],
)
def test_a_bad_flag_is_an_error_naming_the_line_and_the_fix(line, message):
    with pytest.raises(EriDiffusionError, match=r"SampleDuringTraining: prompts " + message):
        specs(line)


def test_more_than_three_references_is_an_error(datasets_dir):
    folder = os.path.join(datasets_dir, "dreambooth_dog")
    with pytest.raises(EriDiffusionError, match="names 4 references; edit models take up to 3"):
        specs("edit --ref 00.jpg --ref 01.jpg --ref 02.jpg --ref 03.jpg", folder)


def test_an_inpainting_image_without_its_mask_is_an_error(datasets_dir):
    with pytest.raises(EriDiffusionError, match=r"takes both --image \(the picture\) and --mask"):
        specs("fill it --image 00.jpg", os.path.join(datasets_dir, "dreambooth_dog"))


def test_edit_is_a_switch_anywhere_on_the_line():
    (spec,) = specs("make it snow --edit --seed 3")
    assert (spec.text, spec.edit, spec.seed) == ("make it snow", True, 3)
