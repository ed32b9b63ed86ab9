"""Issue 27, the silent wrong results: masks that leave nothing to learn, validation or class images
that are the training images, settings that would be ignored. Each is refused by name through
ComfyUI's executor before the trainer makes its run folder (or, for one black mask, warned of)."""

import logging
import os
import shutil

import pytest
from PIL import Image

from devkit.workflow import run_training


def masked(folder, paint):
    """masks/ for every image of `folder`: each as `paint(size)` returns it (a PIL image)."""
    (folder / "masks").mkdir()
    for image in sorted(folder.glob("*.jpg")):
        with Image.open(image) as opened:
            size = opened.size
        paint(size).save(folder / "masks" / (image.stem + ".png"))
    return folder


def black(size):
    return Image.new("L", size, 0)


def transparent(size):
    return Image.new("RGBA", size, (255, 255, 255, 0))


def a_sliver_of_white(size):
    mask = Image.new("L", size, 0)
    mask.paste(255, (0, 0, max(1, size[0] // 300), size[1]))  # well under 1% of the pixels
    return mask


def refused_before_the_run_folder(outcome):
    assert not outcome.success
    assert not os.path.exists(outcome.run_dir)
    return outcome.error


@pytest.mark.parametrize("paint", [black, transparent, a_sliver_of_white], ids=lambda p: p.__name__)
def test_masks_that_leave_nothing_to_train_are_refused_naming_the_images(paint, registered, photos):
    folder = masked(photos(2), paint)
    error = refused_before_the_run_folder(run_training(folder, f"empty_masks_{paint.__name__}"))
    assert error.startswith("EriDiffusion_LoRATrainer: the masks of 2 images (00.jpg, 01.jpg) leave ")
    assert error.endswith(
        "% of their pixels to train on: black means ignore. Paint what the LoRA should learn white in masks/, "
        "or raise TrainingExtras' mask_min."
    )


def test_black_masks_train_where_mask_min_gives_them_weight(registered, photos):
    folder = masked(photos(2), black)
    outcome = run_training(folder, "black_masks_with_floor", trainer={"mask_min": 0.2})
    assert outcome.success, outcome.error


def test_one_black_mask_among_others_is_a_warning_naming_it_and_the_run_trains(registered, photos, caplog):
    folder = photos(2)
    (folder / "masks").mkdir()
    black((320, 240)).resize(Image.open(folder / "00.jpg").size).save(folder / "masks" / "00.png")
    Image.new("L", Image.open(folder / "01.jpg").size, 255).save(folder / "masks" / "01.png")
    with caplog.at_level(logging.WARNING):
        outcome = run_training(folder, "one_black_mask")
    assert outcome.success, outcome.error
    warnings = [r.getMessage() for r in caplog.records if "black all over" in r.getMessage()]
    assert warnings == [
        f"EriDiffusion: the mask {folder / 'masks' / '00.png'} is black all over, so {folder / '00.jpg'} teaches "
        "nothing unless TrainingExtras' mask_min is above 0: paint what it should teach white, or remove the image."
    ]


@pytest.mark.parametrize("role", ["validation", "regularization"])
def test_the_training_folder_as_validation_or_class_images_is_refused(role, registered, photos):
    folder = photos(2)
    extra = {f"{role}_dataset": folder}
    error = refused_before_the_run_folder(run_training(folder, f"same_folder_{role}", **extra))
    what = "validation" if role == "validation" else "regularization (class)"
    fix = (
        "connect a folder of images never trained on, or hold some out with LoadDataset's validation fraction"
        if role == "validation"
        else "connect a folder of other images of the class"
    )
    assert error == f"EriDiffusion_CacheLatents: the {what} dataset is the training folder {folder}; {fix}."


def test_copies_of_the_training_images_as_validation_images_are_refused_naming_one(registered, photos, tmp_path):
    folder = photos(2)
    copies = tmp_path / "copies"
    shutil.copytree(folder, copies)
    error = refused_before_the_run_folder(run_training(folder, "copied_validation", validation_dataset=copies))
    assert error.startswith(
        f"EriDiffusion_CacheLatents: {copies / '00.jpg'} of the validation dataset is the training image "
        f"{folder / '00.jpg'} (the same bytes); connect a folder of images never trained on"
    )


def test_early_stop_patience_without_validation_images_is_refused(registered, photos):
    error = refused_before_the_run_folder(run_training(photos(2), "patience_alone", trainer={"early_stop_patience": 2}))
    assert error == (
        "EriDiffusion_LoRATrainer: early_stop_patience is 2, but the run has no validation images to stop on: hold "
        "some out with LoadDataset's validation fraction, connect a validation_dataset to CacheLatents, or set "
        "early_stop_patience to 0."
    )


def test_block_lr_that_zeroes_every_block_is_refused(registered, photos):
    outcome = run_training(photos(2), "all_blocks_zero", trainer={"block_lr": "input:0,middle:0,output:0"})
    assert not outcome.success
    assert outcome.error == (
        "EriDiffusion_LoRATrainer: block_lr 'input:0,middle:0,output:0' sets the learning rate of every adapted "
        "block to 0, so nothing would train; give some block a multiplier above 0, or clear block_lr."
    )
