"""Edit-pair datasets (Flux Kontext): each target photo with a reference image in control/, the
reference encoded beside it and fed to the model as ComfyUI's ReferenceLatent node does; trained
on a tiny Flux Kontext stack from ComfyUI's own classes (a "colorize" edit of the real photos)."""

import os
import shutil

import pytest
import torch
from PIL import Image, ImageOps

from devkit.photo_clips import write_video
from devkit.tiny_models import TINY_FAMILIES, build_tiny
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.model.inputs import batch_inputs, model_inputs
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora

FAMILY = "flux_kontext"
PAIRS = 4


def make_pairs(datasets_dir, folder, control="control"):
    """PAIRS color photos as targets, their grayscale versions in `control`/ as references."""
    os.makedirs(os.path.join(folder, control))
    for k in range(PAIRS):
        source = os.path.join(datasets_dir, "dreambooth_dog", f"{k:02d}")
        shutil.copy(source + ".jpg", os.path.join(folder, f"{k:02d}.jpg"))
        with open(os.path.join(folder, f"{k:02d}.txt"), "w", encoding="utf-8") as file:
            file.write("colorize the photo of sks dog")
        with Image.open(source + ".jpg") as photo:
            ImageOps.grayscale(photo).convert("RGB").save(os.path.join(folder, control, f"{k:02d}.png"))
    return folder


@pytest.fixture
def pairs(datasets_dir, tmp_path):
    return make_pairs(datasets_dir, str(tmp_path / "pairs"))


@pytest.fixture(scope="module")
def kontext(datasets_dir, tmp_path_factory):
    """The tiny Flux Kontext stack, its encoded pairs, and a training run on them."""
    family = TINY_FAMILIES[FAMILY]
    root = tmp_path_factory.mktemp("kontext")
    folder = make_pairs(datasets_dir, str(root / "pairs"))
    model, clip, vae = build_tiny(FAMILY, seed=0)
    with torch.inference_mode():
        data = build_training_data(load_dataset(folder), vae, clip, family.resolution, str(root / "cache"))
    seen_tokens = []
    hook = model.model.diffusion_model.img_in.register_forward_hook(
        lambda module, args, output: seen_tokens.append(args[0].shape[1])
    )
    config = TrainConfig(
        gradient_checkpointing=False,
        steps=family.steps,
        learning_rate=family.learning_rate,
        dtype="fp32",
        seed=0,
        log_every=20,
        adapter=AdapterSpec(rank=8, alpha=8.0, targets="all-linear"),
        run_name="kontext_pairs",
    )
    try:
        with torch.inference_mode(False):
            result = train_lora(model, data, config, str(root / "run"))
    finally:
        hook.remove()
    return {
        "model": model,
        "clip": clip,
        "vae": vae,
        "data": data,
        "result": result,
        "folder": folder,
        "seen_tokens": seen_tokens,
        "cache": str(root / "cache"),
        "resolution": family.resolution,
    }


def image_tokens(data, patch=2):
    _, h, w = data.samples[0].latent.shape
    return (h // patch) * (w // patch)


# --- the dataset ------------------------------------------------------------------------------


def test_each_target_is_paired_with_the_reference_of_its_stem(pairs):
    dataset = load_dataset(pairs)
    assert [(os.path.basename(r.path), os.path.relpath(r.reference, pairs)) for r in dataset.records] == [
        (f"{k:02d}.jpg", os.path.join("control", f"{k:02d}.png")) for k in range(PAIRS)
    ]


def test_reference_folder_may_be_called_reference(datasets_dir, tmp_path):
    folder = make_pairs(datasets_dir, str(tmp_path / "pairs"), control="reference")
    assert os.path.basename(os.path.dirname(load_dataset(folder).records[2].reference)) == "reference"


def test_target_without_reference_names_the_file_to_add(pairs):
    os.remove(os.path.join(pairs, "control", "02.png"))
    with pytest.raises(
        EriDiffusionError,
        match=r"02\.jpg has no reference image: put the image it was edited from "
        r"in .*control as 02\.png",
    ):
        load_dataset(pairs)


def test_reference_without_target_is_named(pairs):
    shutil.copy(os.path.join(pairs, "control", "00.png"), os.path.join(pairs, "control", "09.png"))
    with pytest.raises(EriDiffusionError, match=r"09\.png is a reference for '09', but the dataset has no image 09"):
        load_dataset(pairs)


def test_control_and_reference_folders_together_are_refused(pairs):
    os.makedirs(os.path.join(pairs, "reference"))
    with pytest.raises(EriDiffusionError, match=r"has both control/ and reference/ reference folders"):
        load_dataset(pairs)


def test_clip_in_an_edit_pair_dataset_is_refused(pairs):
    write_video(os.path.join(pairs, "walk.mp4"), [Image.new("RGB", (96, 64))] * 20, 16)
    with open(os.path.join(pairs, "walk.txt"), "w", encoding="utf-8") as file:
        file.write("a walk")
    with pytest.raises(EriDiffusionError, match=r"walk\.mp4 is a clip, but .*control makes this an edit-pair dataset"):
        load_dataset(pairs, frames=9)


def test_reference_change_changes_the_dataset_fingerprint(pairs):
    before = load_dataset(pairs).fingerprint()
    with Image.open(os.path.join(pairs, "control", "01.png")) as image:
        image.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(os.path.join(pairs, "control", "01.png"))
    assert load_dataset(pairs).fingerprint() != before


# --- caching and the model inputs --------------------------------------------------------------


def test_reference_is_encoded_in_its_targets_bucket_and_cached(kontext):
    data = kontext["data"]
    assert [len(s.reference_latents) for s in data.samples] == [1] * PAIRS
    assert all(s.reference_latents[0].shape == s.latent.shape for s in data.samples)
    assert (data.stats.latents_encoded, data.stats.latents_loaded) == (2 * PAIRS, 0)
    with torch.inference_mode():
        again = build_training_data(
            load_dataset(kontext["folder"]), kontext["vae"], kontext["clip"], kontext["resolution"], kontext["cache"]
        )
    assert (again.stats.latents_encoded, again.stats.latents_loaded) == (0, 2 * PAIRS)
    assert torch.equal(again.samples[3].reference_latents[0], data.samples[3].reference_latents[0])


def test_reference_latents_reach_flux_as_ref_latents_the_way_reference_latent_does(kontext):
    base = kontext["model"].model
    sample = kontext["data"].samples[0]
    inputs = model_inputs(
        base, sample.conditionings[0], sample.latent, "cpu", sample.bucket, reference_latents=sample.reference_latents
    )
    expected = base.process_latent_in(sample.reference_latents[0][None])
    assert len(inputs["ref_latents"].cond) == 1
    assert torch.equal(inputs["ref_latents"].cond[0], expected)
    assert "ref_latents" not in model_inputs(base, sample.conditionings[0], sample.latent, "cpu", sample.bucket)


def _output(model, sample, references):
    base = model.model
    x = base.process_latent_in(sample.latent[None])
    inputs = batch_inputs(
        [model_inputs(base, sample.conditionings[0], x[0], "cpu", sample.bucket, reference_latents=references)]
    )
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(3))
    sigma = torch.tensor([0.7])
    with torch.inference_mode():
        return base.apply_model(base.model_sampling.noise_scaling(sigma, noise, x), sigma, **inputs)


def test_model_output_follows_the_reference_image(kontext):
    samples = kontext["data"].samples
    own = _output(kontext["model"], samples[0], samples[0].reference_latents)
    other = _output(kontext["model"], samples[0], samples[1].reference_latents)
    assert ((own - other).norm() / own.norm()).item() > 1e-3


# --- training -------------------------------------------------------------------------------------


def test_every_training_forward_sees_the_reference_tokens(kontext):
    tokens = image_tokens(kontext["data"])
    assert tokens == 64  # 128 px: a 16x16 latent in 2x2 patches
    assert kontext["seen_tokens"] and set(kontext["seen_tokens"]) == {2 * tokens}


def test_edit_pairs_train_evaluation_loss_drops_at_least_30_percent(kontext):
    result = kontext["result"]
    assert result.eval_loss_after < 0.7 * result.eval_loss_before, (result.eval_loss_before, result.eval_loss_after)
