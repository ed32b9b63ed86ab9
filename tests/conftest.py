"""Test session setup: the real ComfyUI host, its folders in a temp dir, real photos."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from demo import runtime  # noqa: E402

_BASE = os.path.join(os.environ.get("PYTEST_TMPDIR", "/tmp"), f"eridiffusion-tests-{os.getpid()}")
runtime.start_host(_BASE)


@pytest.fixture(scope="session")
def comfy_dirs():
    """ComfyUI's output and loras folders for this test session."""
    import folder_paths
    return {"output": folder_paths.get_output_directory(), "loras": folder_paths.get_folder_paths("loras")[0]}


@pytest.fixture(scope="session")
def datasets_dir():
    path = runtime.shared_datasets()
    assert os.path.isdir(os.path.join(path, "dreambooth_dog")), f"real photos missing under {path}"
    return path
