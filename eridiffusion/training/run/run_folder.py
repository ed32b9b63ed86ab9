"""The folder a run writes into: output/<run_name>, or <run_name>_2, _3 … when it is taken."""

import os
import re

from ...formats.atomic_file import sweep_stale_temp_files, writable_folder


def unique_run_dir(parent, name):
    """parent/name, or parent/name_2, _3 … when an earlier run already wrote there (or a file has
    the name). Temp files
    that killed runs of this name left in their folders are removed first."""
    earlier = re.compile(re.escape(name) + r"(_\d+)?")
    if os.path.isdir(parent):
        for entry in os.scandir(parent):
            if entry.is_dir() and earlier.fullmatch(entry.name):
                for folder in (
                    entry.path,
                    os.path.join(entry.path, "checkpoints"),
                    os.path.join(entry.path, "samples"),
                ):
                    sweep_stale_temp_files(folder)
    candidate, n = os.path.join(parent, name), 1
    while os.path.exists(candidate) and (not os.path.isdir(candidate) or os.listdir(candidate)):
        n += 1
        candidate = os.path.join(parent, f"{name}_{n}")
    return writable_folder(candidate, "run folder")
