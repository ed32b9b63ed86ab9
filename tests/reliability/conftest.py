"""The reliability matrix's fixtures: EriDiffusion loaded into the host, small copies of the real
photos, and short training prompts run through ComfyUI's own executor."""

import os
import shutil

import pytest

from devkit.headless import command_process
from devkit.workflow import load_extension


@pytest.fixture(scope="module")
def command_line():
    """One process of the command line for a module's commands that stop early (devkit.command_process):
    the start of torch and ComfyUI paid once, not by each command."""
    process = command_process()
    yield process
    process.close()


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
