"""Where a LoRA file of a given name goes inside models/loras: the name checked (it stays inside the
folder, the file system can hold it) before any work, and an existing file's name kept free."""

import os

from ..errors import EriDiffusionError

# The longest ending a saved name gets: a counter for an existing name, and the extension.
_ENDING = "_00001.safetensors"


def _name_limit(folder):
    """The longest file name, in bytes, the file system under `folder` takes."""
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def lora_path_for(prefix, loras_dir, overwrite, what="SaveLoRA filename_prefix"):
    """The file for `prefix` inside `loras_dir`; refuses anything that would leave it, and names
    the file system cannot hold (errors name the input as `what`). Without `overwrite`, an existing
    name gets the next free `_NNNNN` suffix."""
    prefix = prefix.strip()
    if prefix.endswith(".safetensors"):
        prefix = prefix[: -len(".safetensors")]
    parts = prefix.replace("\\", "/").split("/")
    if not prefix or os.path.isabs(prefix) or any(p in ("", ".", "..") for p in parts):
        raise EriDiffusionError(
            f"{what} '{prefix}' must be a relative name inside models/{os.path.basename(loras_dir)} "
            "(like 'my_lora' or 'people/my_lora'), without '.' or '..' parts or a leading '/'."
        )
    if "\0" in prefix:
        raise EriDiffusionError(f"{what} {prefix!r} contains a NUL character; remove it.")
    limit = _name_limit(loras_dir)
    longest = max(len(p.encode()) for p in parts[:-1]) if len(parts) > 1 else 0
    if len(parts[-1].encode()) + len(_ENDING) > limit or longest > limit:
        raise EriDiffusionError(
            f"{what} '{prefix}' is too long for the file system, which takes "
            f"names of up to {limit} bytes: keep each folder name and the file name to "
            f"{limit - len(_ENDING)} bytes or less."
        )
    root = os.path.realpath(loras_dir)
    base = os.path.realpath(os.path.join(root, *parts))
    if os.path.commonpath([root, os.path.dirname(base)]) != root or base == root:
        raise EriDiffusionError(f"{what} '{prefix}' resolves outside {root}; use a plain relative name.")
    path = base + ".safetensors"
    counter = 1
    while not overwrite and os.path.exists(path):
        path = f"{base}_{counter:05}.safetensors"
        counter += 1
    return path
