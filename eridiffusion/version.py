"""The version, read from pyproject.toml: the one place it is written (the ComfyUI registry reads
it there too)."""

import os
import re

_PYPROJECT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml")


def _read_version():
    with open(_PYPROJECT, encoding="utf-8") as f:
        match = re.search(r'^version\s*=\s*"([^"]+)"', f.read(), re.M)
    if match is None:
        raise RuntimeError(f"{_PYPROJECT} has no version line")
    return match.group(1)


__version__ = _read_version()
