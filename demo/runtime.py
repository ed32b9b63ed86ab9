"""Starts the ComfyUI host headless for the demo and the tests: host on sys.path, package
importable as `eridiffusion` whatever its folder is called, and ComfyUI's folders pointed
at a place of the caller's choosing so nothing lands inside the host's own tree."""
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_NAME = "eridiffusion"


def import_package():
    """Import this checkout as the `eridiffusion` package (ComfyUI loads it under its folder name)."""
    if PACKAGE_NAME in sys.modules:
        return sys.modules[PACKAGE_NAME]
    spec = importlib.util.spec_from_file_location(PACKAGE_NAME, os.path.join(ROOT, "__init__.py"),
                                                  submodule_search_locations=[ROOT])
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE_NAME] = module
    spec.loader.exec_module(module)
    return module


def start_host(base_dir):
    """Put ComfyUI on sys.path and send its output, input, temp and loras folders under base_dir."""
    import_package()
    from eridiffusion import host
    host.ensure_on_path()
    import torch
    import comfy.cli_args  # before comfy.model_management, which reads the device choice at import
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


def shared_datasets():
    """../shared/datasets beside the checkout, else the copy shipped with the demo."""
    beside = os.path.join(os.path.dirname(ROOT), "shared", "datasets")
    return beside if os.path.isdir(beside) else os.path.join(ROOT, "demo", "data")


def taef2_weights():
    """The TAEF2 weights folder: ../shared/weights/taef2 beside the checkout, else the copy
    shipped with the demo (MIT, 5.4 MB)."""
    beside = os.path.join(os.path.dirname(ROOT), "shared", "weights", "taef2")
    return beside if os.path.isdir(beside) else os.path.join(ROOT, "demo", "data", "taef2")
