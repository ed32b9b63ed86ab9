"""The reliability matrix's fixtures: EriDiffusion loaded into the host, small copies of the real
photos, and short training prompts run through ComfyUI's own executor."""

import os
import shutil

import pytest

from devkit.workflow import load_extension


@pytest.fixture(scope="session")
def registered():
    return load_extension()


@pytest.fixture
def photos(datasets_dir, tmp_path):
    """make(count, name): a folder holding the first `count` DreamBooth dog photos and captions."""

    def make(count=2, name="photos"):
        folder = tmp_path / name
        folder.mkdir()
        for index in range(count):
            for ext in (".jpg", ".txt"):
                shutil.copy(os.path.join(datasets_dir, "dreambooth_dog", f"{index:02d}{ext}"), folder)
        return folder

    return make
