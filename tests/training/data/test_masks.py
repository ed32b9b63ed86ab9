"""Masked loss: masks/ beside the images, fitted to the latent grid exactly as their image (crop,
flip), and a loss whose gradient outside the mask is zero (or mask_min of the unmasked one)."""

import dataclasses
import os
import shutil

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from devkit.photo_masks import IMAGES, copy_photos, half_black_masks
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.data.buckets import fit_to_bucket
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.run.build import TrainingRun
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import TrainingHooks, train


@pytest.fixture(scope="module")
def masked_stack(datasets_dir, tmp_path_factory):
    from devkit.tiny_models import build_tiny

    folder = copy_photos(datasets_dir, str(tmp_path_factory.mktemp("masked")))
    half_black_masks(folder)
    model, clip, vae = build_tiny("sd15", seed=0)
    with torch.inference_mode():
        data = build_training_data(load_dataset(folder), vae, clip, 64, str(tmp_path_factory.mktemp("cache")))
    return model, data


def output_gradient(model, data, mask_min, tmp_path):
    """The gradient of the first step's loss w.r.t. the UNet's output (its ε prediction)."""
    config = TrainConfig(
        steps=1,
        batch_size=2,
        dtype="fp32",
        gradient_checkpointing=False,
        mask_min=mask_min,
        adapter=AdapterSpec(rank=4, alpha=4.0),
        run_name="masked",
    )
    run = TrainingRun(model, data, config, str(tmp_path))
    run.progress.eval_before = 0.0
    gradients = []

    def keep_gradient(module, inputs, output):
        if output.requires_grad:
            output.register_hook(lambda grad: gradients.append(grad.clone()))

    handle = run.base.diffusion_model.register_forward_hook(keep_gradient)
    try:
        with torch.inference_mode(False):
            train(run, None, TrainingHooks())
    finally:
        handle.remove()
        run.release()
    (gradient,) = gradients
    return gradient


def test_masks_are_found_by_stem_and_a_missing_one_is_an_error_or_weight_one(datasets_dir, tmp_path):
    folder = copy_photos(datasets_dir, str(tmp_path / "data"))
    half_black_masks(folder, names=("00",))
    with pytest.raises(EriDiffusionError, match=r"01.jpg has no mask: put one in .*masks as 01.png"):
        load_dataset(folder)
    records = load_dataset(folder, missing_mask="weight_1").records
    assert [os.path.relpath(r.mask, folder) if r.mask else "" for r in records] == ["masks/00.png", ""]
    Image.new("L", (8, 8)).save(os.path.join(folder, "masks", "07.png"))
    with pytest.raises(EriDiffusionError, match="is a mask for '07', but the dataset has no image 07"):
        load_dataset(folder, missing_mask="weight_1")


def test_the_loss_gradient_is_zero_where_the_mask_is_black_and_mask_min_of_it_with_a_floor(masked_stack, tmp_path):
    model, data = masked_stack
    masks = torch.stack([s.mask for s in data.samples])
    black, white = masks == 0, masks == 1  # latent cells wholly inside one half of the mask
    assert black.sum() >= 16 and white.sum() >= 16
    unmasked = dataclasses.replace(data, samples=[dataclasses.replace(s, mask=None) for s in data.samples])
    plain = output_gradient(model, unmasked, 0.0, tmp_path / "plain")
    masked = output_gradient(model, data, 0.0, tmp_path / "masked")
    floored = output_gradient(model, data, 0.25, tmp_path / "floored")
    black, white = black.expand_as(plain), white.expand_as(plain)
    assert torch.count_nonzero(masked[black]) == 0 and torch.count_nonzero(plain[black]) == black.sum()
    torch.testing.assert_close(masked[white], plain[white], rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(floored[black], 0.25 * plain[black], rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(floored[white], plain[white], rtol=1e-5, atol=1e-9)


def test_a_mask_follows_its_image_through_the_bucket_crop_and_the_flip(tmp_path):
    from devkit.tiny_models import build_tiny

    # an asymmetric picture whose mask is its own brightness: wherever the two land, they must agree
    width, height = 320, 192  # landscape: the square bucket crops its sides
    picture = np.zeros((height, width), dtype=np.uint8)
    picture[20:120, 40:150] = 255
    picture[140:180, 200:300] = 128
    folder = tmp_path / "data"
    os.makedirs(folder / "masks")
    Image.fromarray(picture).convert("RGB").save(folder / "a.png")
    (folder / "a.txt").write_text("a picture")
    Image.fromarray(picture).resize((width // 2, height // 2)).save(folder / "masks" / "a.png")  # half size
    dataset = load_dataset(str(folder), flip=True)
    _, clip, vae = build_tiny("sd15", seed=0)
    with torch.inference_mode():
        data = build_training_data(dataset, vae, clip, 64, str(tmp_path / "cache"))
    plain, flipped = data.samples
    assert (plain.mirrored, flipped.mirrored) == (False, True)
    assert not torch.equal(plain.latent, flipped.latent)
    for sample in (plain, flipped):
        image = Image.fromarray(picture)
        fitted, _ = fit_to_bucket(ImageOps.mirror(image) if sample.mirrored else image, sample.bucket)
        expected = torch.nn.functional.interpolate(
            torch.from_numpy(np.asarray(fitted, dtype=np.float32) / 255)[None, None],
            size=tuple(sample.latent.shape[-2:]),
            mode="area",
        )[0]
        assert (sample.mask - expected).abs().max() < 0.03  # the mask was stored at half size
        assert (sample.mask - expected.flip(-1)).abs().max() > 0.3  # (the picture is not symmetric)


def test_edit_pairs_take_masks_and_clips_refuse_them(datasets_dir, tmp_path, dog_clips):
    folder = copy_photos(datasets_dir, str(tmp_path / "pairs"))
    half_black_masks(folder)
    os.makedirs(os.path.join(folder, "control"))
    for name in IMAGES:
        shutil.copy(os.path.join(datasets_dir, "dreambooth_cat", name + ".jpg"), os.path.join(folder, "control"))
    records = load_dataset(folder).records
    assert [(bool(r.reference), bool(r.mask)) for r in records] == [(True, True), (True, True)]
    clips = shutil.copytree(dog_clips.folder, tmp_path / "clips")
    os.makedirs(clips / "masks")
    with pytest.raises(EriDiffusionError, match="holds loss masks, which are for still images"):
        load_dataset(str(clips), frames=dog_clips.video.frames, fps=dog_clips.video.fps)
