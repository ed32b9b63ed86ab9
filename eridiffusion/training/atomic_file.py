"""File writes that never leave a half-written file: write a temp file beside the target, then rename."""
import json
import os
import tempfile

from .errors import EriDiffusionError


def write_atomic(path, write, overwrite=False):
    """Call write(temp_path) and move the result to `path` in one step. Without `overwrite`,
    an existing `path` is an error and stays untouched (checked atomically with a hard link)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise EriDiffusionError(f"{path} already exists; choose another name or allow overwriting.") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def write_json_atomic(path, value):
    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(value, f, indent=1)
    return write_atomic(path, write, overwrite=True)
