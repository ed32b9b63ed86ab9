"""runtime.py: the host started headless, its folders where the caller puts them."""

import os
import subprocess
import sys

from devkit.paths import ROOT


def test_a_temp_dir_host_sends_comfyuis_folders_there_and_is_gone_when_the_process_exits(tmp_path):
    code = (
        "import sys\n"
        "from eridiffusion.runtime import start_host_in_temp_dir\n"
        f"base = start_host_in_temp_dir('eridiffusion-runtime-', parent={str(tmp_path)!r})\n"
        "import folder_paths\n"
        "print(base)\n"
        "print(folder_paths.get_output_directory())\n"
        "print(folder_paths.get_folder_paths('loras')[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    base, output, loras = done.stdout.split()[-3:]
    assert os.path.dirname(base) == str(tmp_path) and os.path.basename(base).startswith("eridiffusion-runtime-")
    assert output == os.path.join(base, "output") and loras == os.path.join(base, "loras")
    assert not os.path.exists(base), "the temp host folder outlived its process"
