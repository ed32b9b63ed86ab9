"""CacheLatents' core: real photos through a tiny ComfyUI VAE and CLIP, cached on disk."""

import os
import shutil

import pytest
import torch

from devkit.tiny_models import build_tiny
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.training_data import build_training_data


@pytest.fixture(scope="module")
def sd15_stack():
    return build_tiny("sd15", seed=0)


def copy_dataset(datasets_dir, tmp_path, count=3):
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in sorted(os.listdir(os.path.join(datasets_dir, "dreambooth_dog")))[: 2 * count]:
        shutil.copy(os.path.join(datasets_dir, "dreambooth_dog", name), folder / name)
    return folder


def encode(folder, stack, cache, resolution=128, **options):
    _, clip, vae = stack
    with torch.inference_mode():
        return build_training_data(load_dataset(str(folder), **options), vae, clip, resolution, str(cache))


def test_first_run_encodes_every_image_and_caption(datasets_dir, tmp_path, sd15_stack):
    data = encode(copy_dataset(datasets_dir, tmp_path), sd15_stack, tmp_path / "cache")
    assert (data.stats.latents_encoded, data.stats.latents_loaded) == (3, 0)
    assert data.stats.texts_encoded == 4  # three captions and the empty prompt for dropout
    assert [s.latent.shape for s in data.samples] == [torch.Size([4, 16, 16])] * 3
    assert all(s.bucket == (128, 128) for s in data.samples)


def test_second_run_over_the_same_inputs_performs_zero_vae_encodes(datasets_dir, tmp_path, sd15_stack):
    folder = copy_dataset(datasets_dir, tmp_path)
    first = encode(folder, sd15_stack, tmp_path / "cache")
    second = encode(folder, sd15_stack, tmp_path / "cache")
    assert (second.stats.latents_encoded, second.stats.texts_encoded) == (0, 0)
    assert (second.stats.latents_loaded, second.stats.texts_loaded) == (3, 4)
    for a, b in zip(first.samples, second.samples):
        assert torch.equal(a.latent, b.latent)
        assert torch.equal(a.conditionings[0][0][0], b.conditionings[0][0][0])
        assert torch.equal(a.conditionings[0][0][1]["pooled_output"], b.conditionings[0][0][1]["pooled_output"])


def test_changed_caption_reencodes_only_that_text(datasets_dir, tmp_path, sd15_stack):
    folder = copy_dataset(datasets_dir, tmp_path)
    encode(folder, sd15_stack, tmp_path / "cache")
    (folder / "00.txt").write_text("a photo of sks dog, a different caption")
    again = encode(folder, sd15_stack, tmp_path / "cache")
    assert (again.stats.latents_encoded, again.stats.texts_encoded) == (0, 1)


def test_changed_image_bytes_or_resolution_or_vae_reencode(datasets_dir, tmp_path, sd15_stack):
    folder = copy_dataset(datasets_dir, tmp_path)
    encode(folder, sd15_stack, tmp_path / "cache")
    with open(folder / "01.jpg", "ab") as f:
        f.write(b"\0")  # same picture, different bytes
    assert encode(folder, sd15_stack, tmp_path / "cache").stats.latents_encoded == 1
    assert encode(folder, sd15_stack, tmp_path / "cache", resolution=192).stats.latents_encoded == 3
    other_vae = build_tiny("sd15", seed=1)[2]
    assert encode(folder, (None, sd15_stack[1], other_vae), tmp_path / "cache").stats.latents_encoded == 3


def test_conditioning_equals_what_clip_text_encode_gives(datasets_dir, tmp_path, sd15_stack):
    folder = copy_dataset(datasets_dir, tmp_path, count=1)
    _, clip, _ = sd15_stack
    for _ in range(2):  # encoded, then read back from disk
        data = encode(folder, sd15_stack, tmp_path / "cache")
        caption = (folder / "00.txt").read_text().strip()
        with torch.inference_mode():
            expected = clip.encode_from_tokens_scheduled(clip.tokenize(caption))
        assert torch.equal(data.samples[0].conditionings[0][0][0], expected[0][0])


def test_tag_shuffling_encodes_the_requested_number_of_variants(datasets_dir, tmp_path, sd15_stack):
    data = encode(
        copy_dataset(datasets_dir, tmp_path, count=1), sd15_stack, tmp_path / "cache", shuffle_tags=True, keep_tags=1
    )
    assert len(data.samples[0].conditionings) == 4


def test_no_temporary_files_are_left_in_the_cache(datasets_dir, tmp_path, sd15_stack):
    encode(copy_dataset(datasets_dir, tmp_path), sd15_stack, tmp_path / "cache")
    leftovers = [f for _, _, files in os.walk(tmp_path / "cache") for f in files if not f.endswith(".safetensors")]
    assert leftovers == []
