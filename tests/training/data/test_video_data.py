"""CacheLatents' core on clips: the real-photo clips through a tiny Wan 2.1 VAE (ComfyUI's WanVAE,
4x temporal compression), bucketed by (frames, width, height) and cached on disk."""

import os
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from devkit.photo_clips import CLIP_FRAMES
from devkit.tiny_models import build_tiny
from devkit.tiny_vaes import tiny_wan21_vae
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.data.buckets import fit_to_bucket
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.media import read_clip
from eridiffusion.training.data.training_data import build_training_data

RESOLUTION = 64
LATENT_FRAMES = (CLIP_FRAMES - 1) // 4 + 1  # the first frame alone, then groups of 4


@pytest.fixture(scope="module")
def wan_vae():
    return tiny_wan21_vae(torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def clip():
    return build_tiny("sd15", seed=0)[1]  # only the captions need encoding


def encode(dataset, vae, clip, cache, resolution=RESOLUTION):
    with torch.inference_mode():  # as ComfyUI runs nodes
        return build_training_data(dataset, vae, clip, resolution, str(cache))


def test_tiny_wan_vae_is_comfyuis_wan21_vae_with_4x_time_and_8x_space(wan_vae):
    assert type(wan_vae.first_stage_model).__module__ == "comfy.ldm.wan.vae"
    assert (wan_vae.latent_dim, wan_vae.latent_channels) == (3, 16)
    assert (wan_vae.temporal_compression_decode(), wan_vae.spacial_compression_encode()) == (4, 8)


def test_clips_encode_to_c_t_h_w_latents_in_one_frames_bucket(dog_clips, wan_vae, clip, tmp_path):
    data = encode(dog_clips, wan_vae, clip, tmp_path / "cache")
    assert [tuple(s.latent.shape) for s in data.samples] == [(16, LATENT_FRAMES, 8, 8)] * 5
    assert [(s.frames, s.bucket) for s in data.samples] == [(CLIP_FRAMES, (64, 64))] * 5
    assert data.buckets() == {(CLIP_FRAMES, 64, 64): [0, 1, 2, 3, 4]}
    assert (data.stats.latents_encoded, data.stats.latents_loaded) == (5, 0)


def test_clip_latent_is_the_vae_encoding_of_the_sampled_cropped_frames(dog_clips, wan_vae, clip, tmp_path):
    data = encode(dog_clips, wan_vae, clip, tmp_path / "cache")
    frames = read_clip(dog_clips.records[1].path, dog_clips.video)
    pixels = torch.from_numpy(
        np.stack([np.asarray(fit_to_bucket(f, (64, 64))[0], dtype=np.float32) for f in frames]) / 255.0
    )
    with torch.inference_mode():
        expected = wan_vae.encode(pixels)[0]
    assert torch.equal(data.samples[1].latent, expected)


def test_second_run_over_the_same_clips_performs_zero_vae_encodes(dog_clips, wan_vae, clip, tmp_path):
    first = encode(dog_clips, wan_vae, clip, tmp_path / "cache")
    second = encode(dog_clips, wan_vae, clip, tmp_path / "cache")
    assert (second.stats.latents_encoded, second.stats.latents_loaded) == (0, 5)
    assert (second.stats.texts_encoded, second.stats.texts_loaded) == (0, 6)
    assert all(torch.equal(a.latent, b.latent) for a, b in zip(first.samples, second.samples))


def test_other_frame_settings_or_changed_frames_reencode_only_what_changed(dog_clips, wan_vae, clip, tmp_path):
    folder = tmp_path / "clips"
    shutil.copytree(dog_clips.folder, folder)
    encode(load_dataset(str(folder), frames=CLIP_FRAMES), wan_vae, clip, tmp_path / "cache")
    frame = folder / "02" / "frame_5.png"
    Image.open(frame).transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(frame)
    again = encode(load_dataset(str(folder), frames=CLIP_FRAMES), wan_vae, clip, tmp_path / "cache")
    assert (again.stats.latents_encoded, again.stats.latents_loaded) == (1, 4)
    shorter = encode(load_dataset(str(folder), frames=5), wan_vae, clip, tmp_path / "cache")
    assert shorter.stats.latents_encoded == 5
    assert tuple(shorter.samples[0].latent.shape) == (16, 2, 8, 8)


def test_images_beside_clips_are_one_frame_samples_in_their_own_bucket(
    dog_clips, datasets_dir, wan_vae, clip, tmp_path
):
    folder = tmp_path / "mixed"
    shutil.copytree(dog_clips.folder, folder)
    for name in ("00.jpg", "00.txt"):
        shutil.copy(os.path.join(datasets_dir, "dreambooth_dog", name), folder / f"photo_{name}")
    data = encode(load_dataset(str(folder), frames=CLIP_FRAMES), wan_vae, clip, tmp_path / "cache")
    assert [(s.frames, tuple(s.latent.shape)) for s in data.samples][-1] == (1, (16, 1, 8, 8))
    assert data.buckets() == {(CLIP_FRAMES, 64, 64): [0, 1, 2, 3, 4], (1, 64, 64): [5]}


def test_frame_count_off_the_4k_plus_1_rule_is_refused_before_encoding(dog_clips, wan_vae, clip, tmp_path):
    dataset = load_dataset(dog_clips.folder, frames=8)
    with pytest.raises(
        EriDiffusionError,
        match=r"clips of 8 frames do not fit this VAE, which compresses time 4x "
        r"and takes 4k\+1 frames.*set LoadDataset's frames to 5 or 9",
    ):
        encode(dataset, wan_vae, clip, tmp_path / "cache")
    assert not os.path.exists(tmp_path / "cache")


def test_clips_with_an_image_vae_are_refused(dog_clips, clip, tmp_path):
    image_vae = build_tiny("sd15", seed=0)[2]
    with pytest.raises(EriDiffusionError, match=r"holds video clips, but this VAE encodes still images"):
        encode(dog_clips, image_vae, clip, tmp_path / "cache")


def test_photos_through_an_image_vae_are_unchanged(datasets_dir, clip, tmp_path):
    image_vae = build_tiny("sd15", seed=0)[2]
    data = encode(
        load_dataset(os.path.join(datasets_dir, "dreambooth_dog")), image_vae, clip, tmp_path / "cache", resolution=128
    )
    assert [tuple(s.latent.shape) for s in data.samples] == [(4, 16, 16)] * 5
    assert [(s.frames, s.reference_latents) for s in data.samples] == [(1, ())] * 5
    assert data.buckets() == {(1, 128, 128): [0, 1, 2, 3, 4]}
