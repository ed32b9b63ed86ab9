"""Every family's training step replays as CUDA graphs: with cuda_graphs on (where a capture that
fails, or inputs a graph cannot hold, stop the run) each tiny family's stack trains on real photos
(clips made from them for video) the same steps as an eager run. Needs a CUDA device (run on the
GPU machine: see bench/gpu_host.sh)."""

import os
import shutil

import pytest
import torch

from eridiffusion.training.latent_cache import build_training_data
from eridiffusion.training.trainer import train_lora
from tests.support.photo_clips import CLIP_FRAMES, pan_and_zoom, write_frame_folder, write_gif
from tests.support.short_runs import short_run as config
from tests.support.tiny_models import TINY_FAMILIES, build_tiny, family_params

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


@pytest.fixture(scope="module")
def still_clips(datasets_dir, tmp_path_factory):
    """Two captioned clips of the dog photos that need no video codec: a GIF and a frame folder."""
    from eridiffusion.training.dataset import load_dataset

    photos = os.path.join(datasets_dir, "dreambooth_dog")
    folder = str(tmp_path_factory.mktemp("still_clips"))
    for stem, write in (("00", write_gif), ("01", None)):
        frames = pan_and_zoom(os.path.join(photos, f"{stem}.jpg"), count=12)
        if write is None:
            write_frame_folder(os.path.join(folder, stem), frames)
        else:
            write(os.path.join(folder, f"{stem}.gif"), frames, 16)
        shutil.copy(os.path.join(photos, f"{stem}.txt"), os.path.join(folder, f"{stem}.txt"))
    return load_dataset(folder, frames=CLIP_FRAMES, fps=16.0)


@pytest.mark.parametrize("name", family_params(sorted(TINY_FAMILIES)))
def test_every_familys_step_replays_as_cuda_graphs_and_trains_what_eager_trains(name, request, tmp_path):
    family = TINY_FAMILIES[name]
    model, clip, vae = build_tiny(name, seed=0)
    dataset = request.getfixturevalue("still_clips" if family.video_frames else "dog_dataset")
    with torch.inference_mode():  # as ComfyUI runs nodes
        data = build_training_data(dataset, vae, clip, family.resolution, str(tmp_path / "cache"))
    data.samples = data.samples[:2]
    with torch.inference_mode(False):
        eager = train_lora(model, data, config("off", "eager", steps=3), str(tmp_path / "eager"))
        graphed = train_lora(model, data, config("on", "graphs", steps=3), str(tmp_path / "graphs"))
    # the same steps as the eager run, to the GPU's run-to-run noise
    assert graphed.losses == pytest.approx(eager.losses, rel=1e-3)
