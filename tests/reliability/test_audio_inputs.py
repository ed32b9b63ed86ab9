"""Audio datasets checked before anything is encoded: an audio file that cannot be decoded, one without
a caption, a lyrics file without its audio, audio given to an image model's VAE and images given to
ACE-Step 1.5's each stop with one EriDiffusionError naming the file or folder and the fix."""

import os
import shutil

import pytest
import torch

from devkit.music_clips import music_dataset
from devkit.tiny_models import build_tiny, family_params
from eridiffusion.comfy_compat import host_audio_io, host_version
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.training_data import build_training_data

pytestmark = pytest.mark.skipif(
    host_audio_io() is None, reason=f"ComfyUI {host_version()} reads no audio files as LoadAudio does (0.28 on)"
)


@pytest.fixture
def music(tmp_path):
    return music_dataset(str(tmp_path / "music"), per_style=1)


def test_an_audio_file_that_cannot_be_decoded_is_named_with_the_fix(music):
    broken = os.path.join(music, "rock_00.wav")
    with open(broken, "wb") as f:
        f.write(b"RIFF not really a wave file")
    with pytest.raises(EriDiffusionError, match=r"rock_00\.wav cannot be read as audio .*re-export it"):
        load_dataset(music, seconds=2.0)


def test_an_audio_file_without_a_caption_is_named_with_the_file_to_write(music):
    os.remove(os.path.join(music, "ambient_00.txt"))
    with pytest.raises(EriDiffusionError, match=r"ambient_00\.wav has no caption; write ambient_00\.txt beside it"):
        load_dataset(music, seconds=2.0)


def test_a_lyrics_file_without_its_audio_file_is_named(music):
    shutil.copy(os.path.join(music, "rock_00.lyrics.txt"), os.path.join(music, "rock_09.lyrics.txt"))
    with pytest.raises(EriDiffusionError, match=r"rock_09\.lyrics\.txt has no audio file beside it"):
        load_dataset(music, seconds=2.0)


def test_a_bad_annotation_field_is_named_with_its_file(music):
    with open(os.path.join(music, "rock_00.json"), "w") as f:
        f.write('{"bpm": 120, "keyscale": "H dorian"}')
    with pytest.raises(EriDiffusionError, match=r'rock_00\.json: "keyscale" \'H dorian\' is not a key'):
        load_dataset(music, seconds=2.0)


def test_audio_given_to_an_image_models_vae_stops_before_encoding(music, tmp_path):
    _, clip, vae = build_tiny("sd15")
    cache = tmp_path / "cache"
    with pytest.raises(EriDiffusionError, match=r"holds audio files, but this VAE encodes images.*ACE-Step 1\.5"):
        with torch.inference_mode():
            build_training_data(load_dataset(music, seconds=2.0), vae, clip, 64, str(cache))
    assert not (cache / "latents").exists() or not os.listdir(cache / "latents")


@pytest.mark.parametrize("family", family_params(["ace_step15"]))
def test_images_given_to_ace_step15_stop_before_encoding(family, dog_dataset, tmp_path):
    _, clip, vae = build_tiny(family)
    cache = tmp_path / "cache"
    with pytest.raises(EriDiffusionError, match=r"this VAE encodes audio .*give LoadDataset a folder of audio files"):
        with torch.inference_mode():
            build_training_data(dog_dataset, vae, clip, 64, str(cache))
    assert not (cache / "latents").exists() or not os.listdir(cache / "latents")
