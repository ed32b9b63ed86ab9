"""Starting the ComfyUI host headless (the demo, the tests, the headless runner): the host on
sys.path, ComfyUI's folders pointed at a place of the caller's choosing so nothing lands inside the
host's own tree."""

import atexit
import os
import shutil
import tempfile

from . import host


def start_host(base_dir):
    """Put ComfyUI on sys.path and send its output, input, temp and loras folders under base_dir."""
    host.ensure_on_path()
    import comfy.cli_args  # before comfy.model_management, which reads the device choice at import
    import torch

    if not torch.cuda.is_available():
        comfy.cli_args.args.cpu = True
    import folder_paths

    for name in ("output", "input", "temp", "loras"):
        os.makedirs(os.path.join(base_dir, name), exist_ok=True)
    folder_paths.set_output_directory(os.path.join(base_dir, "output"))
    folder_paths.set_input_directory(os.path.join(base_dir, "input"))
    folder_paths.set_temp_directory(os.path.join(base_dir, "temp"))
    folder_paths.add_model_folder_path("loras", os.path.join(base_dir, "loras"), is_default=True)
    return base_dir


def start_host_in_temp_dir(prefix, parent=None):
    """start_host() under a new temp folder (in `parent`, else the system's) that is removed when
    this process exits: the tests, benchmarks and scripts whose outputs nobody keeps."""
    base_dir = tempfile.mkdtemp(prefix=prefix, dir=parent)
    atexit.register(shutil.rmtree, base_dir, ignore_errors=True)
    return start_host(base_dir)
