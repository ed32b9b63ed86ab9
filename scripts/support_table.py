"""Rewrite the README's support table and docs/models.md's table of every ComfyUI model class
(devkit/support_table.py). The README's is the same on every host; the models table lists the
classes of the newest tested host, so run it there:

COMFYUI_PATH=.hosts/comfyui-0.28.0/ComfyUI .venv-comfyui-0.28.0/bin/python scripts/support_table.py
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from eridiffusion.runtime import start_host_in_temp_dir  # noqa: E402


def rewrite(path, marker, table):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    block = f"<!-- {marker}:start -->\n{table}\n<!-- {marker}:end -->"
    text, count = re.subn(rf"<!-- {marker}:start -->.*?<!-- {marker}:end -->", lambda _: block, text, flags=re.S)
    if count != 1:
        sys.exit(f"{path} lacks the {marker} markers")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    start_host_in_temp_dir("eridiffusion-table-")
    import comfy.supported_models

    from devkit.support_table import models_table, support_table
    from devkit.tiny_models import TESTED_HOSTS
    from eridiffusion.comfy_compat import host_version

    rewrite(os.path.join(ROOT, "README.md"), "support-table", support_table())
    if host_version() != TESTED_HOSTS[-1]:
        sys.exit(f"docs/models.md lists ComfyUI {TESTED_HOSTS[-1]}'s classes: run this on that host")
    classes = [model.__name__ for model in comfy.supported_models.models]
    rewrite(os.path.join(ROOT, "docs", "models.md"), "models-table", models_table(classes))


if __name__ == "__main__":
    main()
