"""Issue 27's property tests: the config reader (ours and ai-toolkit's format) and the dataset
scanner, given arbitrary text, structures and folders, answer with a valid result or EriDiffusion's
named error, never another exception. (The state reader's: test_tampered_state.py.)"""

import io
import json
import os
import shutil
import tempfile

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from eridiffusion.errors import EriDiffusionError
from eridiffusion.headless.run_config import load_run_config
from eridiffusion.training.data.dataset import load_dataset

SECTIONS = ["model", "dataset", "cache", "train", "objective", "sample", "save", "logging", "output", "_base_"]
KEYS = ["checkpoint", "folder", "steps", "rank", "learning_rate", "prompts", "filename_prefix", "resolution", "x"]
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(10**400), 10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["tiny-sdxl", "tiny-sd15", "images", "AdamW", "lora", "../x", "/", ""])
)
VALUES = st.recursive(
    LEAVES,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=16,
)


def section(name):
    """A section with the keys its settings have (and a stray one), any values."""
    from eridiffusion.headless.schema import section_settings

    keys = sorted(section_settings(name)) if name not in ("output", "_base_") else KEYS
    return st.dictionaries(st.sampled_from(keys) | st.text(max_size=6), VALUES, max_size=6) | VALUES


OURS = st.fixed_dictionaries(
    {"model": st.sampled_from(["tiny-sdxl", "tiny-sd15"]) | section("model")},
    optional={name: section(name) for name in SECTIONS if name != "model"},
) | st.dictionaries(st.sampled_from(SECTIONS) | st.text(max_size=6), VALUES, max_size=6)
AI_TOOLKIT = st.builds(
    lambda name, process: {"job": "extension", "config": {"name": name, "process": [process]}},
    st.text(max_size=8),
    st.dictionaries(
        st.sampled_from(["type", "network", "save", "datasets", "train", "model", "sample", "logging", "trigger_word"]),
        VALUES,
        max_size=6,
    ),
)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def read(text):
    folder = tempfile.mkdtemp()
    try:
        path = os.path.join(folder, "config.yaml")
        with open(path, "w" if isinstance(text, str) else "wb") as f:
            f.write(text)
        try:
            return load_run_config(path)
        except EriDiffusionError:
            return None
    finally:
        shutil.rmtree(folder)


@FUZZ
@given(structure=OURS | AI_TOOLKIT)
@example(structure={"model": "tiny-sdxl", "train": {"learning_rate": 10**400, "rank": 10**400}})
def test_any_structure_as_a_config_reads_or_is_the_named_error(structure):
    read(yaml.safe_dump(structure, allow_unicode=True))


@FUZZ
@given(text=st.text(max_size=200) | st.binary(max_size=200))
def test_any_text_or_bytes_as_a_config_reads_or_is_the_named_error(text):
    read(text)


def jpeg(size=(80, 72)):
    buffer = io.BytesIO()
    Image.new("RGB", size, (120, 60, 30)).save(buffer, format="JPEG")
    return buffer.getvalue()


STEMS = st.sampled_from(["00", "01", "a", "clip", ".hidden"])
NAMES = st.builds(
    lambda stem, ext: stem + ext,
    STEMS,
    st.sampled_from([".jpg", ".png", ".txt", ".caption", ".mp4", ".gif", ".csv", "", ".JPG"]),
) | st.just("metadata.jsonl")
CONTENTS = (
    st.sampled_from([b"", b"a photo of sks dog", b"\xff\xfe", b"{}\n", b"not an image"])
    | st.builds(lambda: jpeg())
    | st.builds(
        lambda rows: "\n".join(json.dumps(r) for r in rows).encode(),
        st.lists(st.dictionaries(st.sampled_from(["file_name", "text", "caption"]), LEAVES, max_size=3), max_size=3),
    )
)
FOLDERS = st.dictionaries(
    st.builds(lambda sub, name: sub + name, st.sampled_from(["", "control/", "masks/", "clip/", "reference/"]), NAMES),
    CONTENTS,
    max_size=8,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    files=FOLDERS, options=st.fixed_dictionaries({}, optional={"validation": st.floats(0, 0.5), "flip": st.booleans()})
)
def test_any_folder_as_a_dataset_loads_or_is_the_named_error(files, options):
    folder = tempfile.mkdtemp()
    try:
        for name, content in files.items():
            path = os.path.join(folder, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(content)
        try:
            dataset = load_dataset(folder, frames=1, **options)
        except EriDiffusionError:
            return
        assert dataset.records and all(r.caption for r in dataset.records)
    finally:
        shutil.rmtree(folder)
