"""Multi-reference edit datasets probed with new bad layouts, as LoadDataset reads them through ComfyUI's
executor: a fourth reference folder, side folders named almost as control/ or masks/, and metadata.jsonl
columns that name references EriDiffusion would not read. Each is refused by name (was: read as a clip
with a wrong fix, or silently ignored)."""

import json
import os

import pytest
from PIL import Image

from devkit.workflow import run_training
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.data.dataset import load_dataset

REFERENCES = (
    "is not read: a target's edit references go in control/ (or reference/), then control_2/ and control_3/ "
    "(three at most, as the edit models take them); rename it to one of those, or move it out of the dataset folder."
)


def side_folder(folder, name, stems=("00", "01")):
    (folder / name).mkdir()
    for stem in stems:
        Image.new("RGB", (64, 64), "gray").save(folder / name / f"{stem}.png")


def test_a_fourth_reference_folder_is_refused_through_the_executor_not_read_as_a_clip(registered, photos):
    folder = photos(2)
    for name in ("control", "control_2", "control_3", "control_4"):
        side_folder(folder, name)
    outcome = run_training(folder, "fourth_reference")
    assert not outcome.success and not os.path.exists(outcome.run_dir)
    assert outcome.error == f"EriDiffusion_LoadDataset: {folder / 'control_4'} {REFERENCES}"


@pytest.mark.parametrize("name", ["controls", "references", "control_1", "control4", "ctrl", "Control_0"])
def test_a_side_folder_named_almost_as_a_reference_folder_is_refused_naming_the_folders_read(name, photos):
    folder = photos(2)
    side_folder(folder, name)
    with pytest.raises(EriDiffusionError) as raised:
        load_dataset(str(folder))
    assert str(raised.value) == f"{folder / name} {REFERENCES}"


def test_a_mask_folder_named_in_the_singular_is_refused_naming_masks(photos):
    folder = photos(2)
    side_folder(folder, "mask")
    with pytest.raises(EriDiffusionError) as raised:
        load_dataset(str(folder))
    assert str(raised.value) == f"{folder / 'mask'} is not read: loss masks go in masks/; rename it to masks."


def write_metadata(folder, columns):
    side_folder(folder, "refs")
    with open(folder / "metadata.jsonl", "w") as f:
        for index in range(2):
            os.remove(folder / f"{index:02d}.txt")
            f.write(json.dumps({"file_name": f"{index:02d}.jpg", "text": "a dog", **columns}) + "\n")


@pytest.mark.parametrize("column", ["control_4", "ctrl_img", "control_image", "reference", "controls"])
def test_a_metadata_column_naming_a_reference_that_is_not_read_is_refused(column, photos):
    folder = photos(2)
    write_metadata(folder, {"control": "refs/00.png", column: "refs/01.png"})
    with pytest.raises(EriDiffusionError) as raised:
        load_dataset(str(folder))
    assert str(raised.value) == (
        f"{folder / 'metadata.jsonl'} line 1 names {column}, which is not read: a target's references go in the "
        "columns control, control_2, control_3 (three at most, as the edit models take them); rename or remove it."
    )


def test_other_metadata_columns_are_still_read_as_before(photos):
    folder = photos(2)
    write_metadata(folder, {"control": "refs/00.png", "aesthetic_score": 6.5, "controlnet_strength": 1})
    records = load_dataset(str(folder)).records
    assert [os.path.basename(r.reference) for r in records] == ["00.png", "00.png"]


READS_NONE = (
    "the dataset pairs its images with edit references (control/ folders or metadata.jsonl's control columns), but "
    "ComfyUI loaded this model as SD15, which reads none; train an edit model (Flux Kontext, Flux.2, "
    "Qwen-Image-Edit), or move the references out of the dataset."
)


def test_edit_references_for_a_model_that_reads_none_are_refused_through_the_executor(registered, photos):
    folder = photos(2)
    side_folder(folder, "control")
    outcome = run_training(folder, "references_unread")
    assert not outcome.success and not os.path.exists(outcome.run_dir)
    assert outcome.error == f"EriDiffusion_LoRATrainer: {READS_NONE}"


def test_edit_references_for_a_model_that_reads_none_are_refused_headless_before_any_image_is_encoded(
    photos, command_line
):
    from devkit.headless import named_in, refused_train, write_yaml

    folder = photos(2)
    side_folder(folder, "control")
    config = write_yaml(
        folder.parent / "run.yaml", f"model: tiny-sd15\ndataset: {{folder: {folder}}}\ntrain: {{steps: 1}}\n"
    )
    error, left = refused_train(config, folder.parent / "out", cwd=folder.parent, process=command_line)
    assert (named_in(config, error), left) == (READS_NONE, [])  # no latent cache, no run folder
