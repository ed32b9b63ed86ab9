"""LoadDataset: clips and edit pairs through the node's own inputs, and what its widgets offer."""

import os

from devkit.photo_clips import CLIP_FRAMES
from eridiffusion.nodes.dataset_node import LoadDataset


def run(folder, frames=17, fps=16.0):
    return LoadDataset.execute(folder=folder, frames=frames, fps=fps).result[0]


def test_frames_and_fps_inputs_reach_the_dataset(dog_clips):
    dataset = run(dog_clips.folder, frames=5, fps=8.0)
    assert (dataset.video.frames, dataset.video.fps) == (5, 8.0)
    assert [r.clip for r in dataset.records] == [True] * 5


def test_node_loads_the_clip_fixture_as_the_core_does(dog_clips):
    assert run(dog_clips.folder, frames=CLIP_FRAMES).fingerprint() == dog_clips.fingerprint()


def test_frames_widget_steps_through_4k_plus_1_counts_and_tooltips_name_the_conventions():
    required = LoadDataset.INPUT_TYPES()["required"]
    frames = required["frames"][1]
    assert (frames["default"], frames["min"], frames["step"]) == (17, 1, 4)
    assert "4k+1" in frames["tooltip"] and "8k+1" in frames["tooltip"]
    assert required["fps"][1]["default"] == 16.0
    assert "control/" in required["folder"][1]["tooltip"]


def test_image_dataset_through_the_node_is_unchanged(datasets_dir):
    folder = os.path.join(datasets_dir, "dreambooth_dog")
    dataset = run(folder)
    assert [(r.clip, r.reference) for r in dataset.records] == [(False, "")] * 5
    assert [(r.width, r.height) for r in dataset.records][:2] == [(780, 780), (781, 781)]
