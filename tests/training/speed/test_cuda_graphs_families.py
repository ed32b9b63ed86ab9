"""Every family's training step replays as CUDA graphs: with cuda_graphs on (where a capture that
fails, or inputs a graph cannot hold, stop the run) each tiny family's stack trains on real photos
(clips made from them for video, synthesized music for audio, masks for fill models) the same steps
as an eager run. The one family no graph can hold says where and why with cuda_graphs on, and trains
eagerly with auto. Needs a CUDA device (run on the GPU machine: see bench/gpu_suite.sh)."""

import os
import shutil

import pytest
import torch

from devkit.photo_clips import CLIP_FRAMES, pan_and_zoom, write_frame_folder
from devkit.short_runs import short_run as config
from devkit.tiny_models import TINY_FAMILIES, build_tiny, family_params
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.run.trainer import train_lora

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")

# The families whose step no CUDA graph holds, and the op that stops the capture: HiDream's
# mixture-of-experts picks each expert's tokens by a boolean mask, and HiDream-O1 its image tokens,
# output shapes only the data decides (a host sync).
UNCAPTURABLE = {"hidream": "hidream/model\\.py", "hidream_o1": "hidream_o1/model\\.py"}


@pytest.fixture(scope="module")
def frame_folder_clips(datasets_dir, tmp_path_factory):
    """A folder of two captioned clips of the dog photos as frame folders (read without PyAV)."""

    photos = os.path.join(datasets_dir, "dreambooth_dog")
    folder = str(tmp_path_factory.mktemp("frame_folder_clips"))
    for stem in ("00", "01"):
        write_frame_folder(os.path.join(folder, stem), pan_and_zoom(os.path.join(photos, f"{stem}.jpg"), count=12))
        shutil.copy(os.path.join(photos, f"{stem}.txt"), os.path.join(folder, f"{stem}.txt"))
    return folder


def _clips(folder, frames):
    return load_dataset(folder, frames=frames or CLIP_FRAMES, fps=16.0)


def _stack(name, request, folder):
    family = TINY_FAMILIES[name]
    model, clip, vae = build_tiny(name, seed=0)
    if family.audio_seconds:  # an audio model's VAE: synthesized music
        dataset = load_dataset(request.getfixturevalue("music_folder"), seconds=family.audio_seconds)
    elif family.video_frames:  # read at the family's clip length (Mochi's VAE takes 6k+1 frames)
        dataset = _clips(request.getfixturevalue("frame_folder_clips"), family.video_frames)
    else:
        dataset = request.getfixturevalue("dog_dataset")
    with torch.inference_mode():  # as ComfyUI runs nodes (the data each family's model reads: fill's masks)
        data = build_training_data(
            dataset,
            vae,
            clip,
            family.resolution,
            str(folder / "cache"),
            start_image=family.start_image,
            inpaint=family.inpaint,
        )
    data.samples = data.samples[:2]
    return model, data


def _losses(model, data, cuda_graphs, folder):
    with torch.inference_mode(False):
        return train_lora(model, data, config(cuda_graphs, cuda_graphs, steps=3), str(folder / cuda_graphs)).losses


@pytest.mark.parametrize("name", family_params(sorted(set(TINY_FAMILIES) - set(UNCAPTURABLE))))
def test_every_familys_step_replays_as_cuda_graphs_and_trains_what_eager_trains(name, request, tmp_path):
    model, data = _stack(name, request, tmp_path)
    eager = _losses(model, data, "off", tmp_path)
    # the same steps as the eager run, to the GPU's run-to-run noise
    assert _losses(model, data, "on", tmp_path) == pytest.approx(eager, rel=1e-3)


@pytest.mark.parametrize("name", family_params(sorted(UNCAPTURABLE)))
def test_a_family_no_graph_holds_names_the_op_with_on_and_trains_eagerly_with_auto(name, request, tmp_path):
    model, data = _stack(name, request, tmp_path)
    refused = rf"not permitted when stream is capturing, at {UNCAPTURABLE[name]} line"
    with pytest.raises(EriDiffusionError, match=refused):
        _losses(model, data, "on", tmp_path)
    assert _losses(model, data, "auto", tmp_path) == pytest.approx(_losses(model, data, "off", tmp_path), rel=1e-3)
