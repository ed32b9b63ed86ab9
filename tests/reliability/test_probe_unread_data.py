"""Data that is read and then dropped, probed: a metadata.jsonl caption under another column name (the
trigger word silently became the caption), a line with both text and caption (caption silently
dropped), an audio annotation field under another tool's name (its value silently replaced by the
default). Each is refused by name, with the fix, before any image or sound is decoded."""

import json
import os

import pytest

from devkit.music_clips import music_dataset
from eridiffusion.comfy_compat import host_audio_io
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.data.dataset import load_dataset


def write_metadata(folder, columns):
    """metadata.jsonl for the folder's two photos (their caption files removed), each line with `columns`."""
    with open(folder / "metadata.jsonl", "w") as f:
        for index in range(2):
            os.remove(folder / f"{index:02d}.txt")
            f.write(json.dumps({"file_name": f"{index:02d}.jpg", **columns}) + "\n")


@pytest.mark.parametrize("column", ["prompt", "tags", "captions", "description", "caption_2"])
def test_a_metadata_caption_under_another_column_name_is_refused_not_replaced_by_the_trigger_word(column, photos):
    folder = photos(2)
    write_metadata(folder, {column: "a photo of sks dog on grass"})
    with pytest.raises(EriDiffusionError) as raised:
        load_dataset(str(folder), trigger_word="sks", missing_caption="trigger_word")
    assert str(raised.value) == (
        f"{folder / 'metadata.jsonl'} line 1 has the column '{column}', which is not read: an image's caption goes "
        "in text (or caption); rename it to text, or remove it."
    )


def test_a_metadata_line_with_both_text_and_caption_is_refused_naming_the_line(photos):
    folder = photos(2)
    write_metadata(folder, {"text": "a dog", "caption": "a photo of sks dog"})
    with pytest.raises(EriDiffusionError) as raised:
        load_dataset(str(folder))
    assert str(raised.value) == (
        f"{folder / 'metadata.jsonl'} line 1 has both text and caption, and an image has one caption (text would be "
        "read, caption dropped); keep one of the two."
    )


def test_a_metadata_column_nothing_names_as_caption_or_reference_is_still_left_alone(photos):
    folder = photos(2)
    write_metadata(folder, {"text": "a dog", "aesthetic_score": 6.5, "source": "dreambooth"})
    assert [r.caption for r in load_dataset(str(folder)).records] == ["a dog", "a dog"]


@pytest.mark.skipif(host_audio_io() is None, reason="this ComfyUI reads no audio files as LoadAudio does")
@pytest.mark.parametrize("field, meant", [("vocal_language", "language"), ("key", "keyscale"), ("tempo", "bpm")])
def test_an_audio_annotation_field_under_another_name_is_refused_naming_acesteps_name(field, meant, tmp_path):
    folder = music_dataset(str(tmp_path / "music"), per_style=1)
    annotation = os.path.join(folder, "rock_00.json")
    with open(annotation, "w") as f:
        json.dump({"bpm": 120, "keyscale": "A minor", field: "de" if field == "vocal_language" else 90}, f)
    with pytest.raises(EriDiffusionError) as raised:
        load_dataset(folder, seconds=2.0)
    assert str(raised.value) == (
        f'{annotation}: "{field}" is not read; ACE-Step 1.5\'s annotation calls it "{meant}": rename it.'
    )
