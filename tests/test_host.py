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


def test_without_a_given_host_the_suite_runs_on_the_host_its_venv_records():
    from devkit.tiny_models import TESTED_HOSTS

    path = host.comfyui_path()
    recorded = os.path.join(sys.prefix, host.HOST_RECORD)
    given = os.environ.get("COMFYUI_PATH") or host.enclosing_comfyui()
    if given:  # a developer's ComfyUI install (test_host.sh names its host so too): that one must win
        assert path == os.path.abspath(given)
    else:  # scripts/bootstrap.sh built this venv (the README's commands, CI) and recorded its host
        with open(recorded, encoding="utf-8") as f:
            assert path == f.read().strip()
    assert host.version_of(path) in TESTED_HOSTS


def _venv_with_record(tmp_path, recorded):
    """A bare venv (no pip) whose comfyui-host names `recorded`; its python."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (venv / host.HOST_RECORD).write_text(recorded + "\n")
    return str(venv / "bin" / "python")


def test_a_venv_built_for_a_host_finds_it_without_comfyui_path(tmp_path):
    comfy = fake_comfyui(str(tmp_path / "Shipped" / "ComfyUI"))
    python = _venv_with_record(tmp_path, comfy)
    env = {k: v for k, v in os.environ.items() if k != "COMFYUI_PATH"}
    out = subprocess.run([python, host.__file__], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() == comfy
    # the bootstrap's own look-up (`--external`) ignores the record: it asks for a host given from outside
    out = subprocess.run([python, host.__file__, "--external"], capture_output=True, text=True, env=env)
    assert out.returncode in (0, 3) and out.stdout.strip() != comfy  # 0: this checkout sits in a ComfyUI


def test_a_venv_whose_recorded_host_is_gone_says_to_bootstrap_again(tmp_path):
    python = _venv_with_record(tmp_path, str(tmp_path / "deleted" / "ComfyUI"))
    env = {k: v for k, v in os.environ.items() if k != "COMFYUI_PATH"}
    out = subprocess.run([python, host.__file__], capture_output=True, text=True, env=env)
    assert out.returncode == 2
    assert "deleted" in out.stderr and "scripts/bootstrap.sh" in out.stderr


def test_external_only_lookup_reports_absence_with_exit_3(tmp_path):
    # a copy outside any ComfyUI, with no COMFYUI_PATH: the bootstrap then installs the bundled host
    os.makedirs(tmp_path / "checkout" / "eridiffusion")
    shutil.copy(host.__file__, tmp_path / "checkout" / "eridiffusion")
    assert run_host(str(tmp_path / "checkout" / "eridiffusion" / "host.py"), None, "--external").returncode == 3
