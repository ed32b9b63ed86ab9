"""Rewrite the README's support table (devkit/support_table.py); the same on every host.

.venv/bin/python scripts/support_table.py
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from eridiffusion.runtime import start_host_in_temp_dir  # noqa: E402


def main():
    start_host_in_temp_dir("eridiffusion-table-")
    from devkit.support_table import support_table

    path = os.path.join(ROOT, "README.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    block = f"<!-- support-table:start -->\n{support_table()}\n<!-- support-table:end -->"
    text, count = re.subn(
        r"<!-- support-table:start -->.*?<!-- support-table:end -->", lambda _: block, text, flags=re.S
    )
    if count != 1:
        sys.exit("README.md lacks the support-table markers")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
