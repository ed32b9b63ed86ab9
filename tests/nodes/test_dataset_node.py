"""LoadDataset: clips and edit pairs through the node's own inputs and DatasetMediaOptions', and what
their widgets offer."""

import os

from devkit.photo_clips import CLIP_FRAMES
from eridiffusion.nodes.dataset_node import LoadDataset
from eridiffusion.nodes.media_options import DatasetMediaOptions


def run(folder, frames=17, fps=16.0):
    media = DatasetMediaOptions.execute(frames=frames, fps=fps).result[0]
    return LoadDataset.execute(folder=folder, media_options=media).result[0]


def test_frames_and_fps_inputs_reach_the_dataset(dog_clips):
    dataset = run(dog_clips.folder, frames=5, fps=8.0)
    assert (dataset.video.frames, dataset.video.fps) == (5, 8.0)
    assert [r.clip for r in dataset.records] == [True] * 5


def test_node_loads_the_clip_fixture_as_the_core_does(dog_clips):
    assert run(dog_clips.folder, frames=CLIP_FRAMES).fingerprint() == dog_clips.fingerprint()


def test_frames_widget_steps_through_4k_plus_1_counts_and_tooltips_name_the_conventions():
    required = DatasetMediaOptions.INPUT_TYPES()["required"]
    frames = required["frames"][1]
    assert (frames["default"], frames["min"], frames["step"]) == (17, 1, 4)
    assert "4k+1" in frames["tooltip"] and "8k+1" in frames["tooltip"]
    assert required["fps"][1]["default"] == 16.0
    assert "control/" in LoadDataset.INPUT_TYPES()["required"]["folder"][1]["tooltip"]


def test_without_media_options_an_image_dataset_takes_the_clip_settings_defaults(datasets_dir):
    dataset = LoadDataset.execute(folder=os.path.join(datasets_dir, "dreambooth_dog")).result[0]
    assert (dataset.video.frames, dataset.video.fps) == (17, 16.0)


def test_image_dataset_through_the_node_is_unchanged(datasets_dir):
    folder = os.path.join(datasets_dir, "dreambooth_dog")
    dataset = run(folder)
    assert [(r.clip, r.reference) for r in dataset.records] == [(False, "")] * 5
    assert [(r.width, r.height) for r in dataset.records][:2] == [(780, 780), (781, 781)]
