"""What a user installs: requirements.txt adds EriDiffusion's own needs with lower bounds and never
moves a package the user's ComfyUI already has; pyproject.toml is what ComfyUI's registry reads."""

import json
import os
import re
import sys

import folder_paths
import pytest
from comfy_config.config_parser import extract_node_configuration

from devkit.paths import ROOT
from eridiffusion import __version__

HOST = os.path.dirname(os.path.abspath(folder_paths.__file__))


def requirement_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def name_of(requirement):
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_requirements_give_lower_bounds_only_and_leave_the_hosts_own_packages_alone():
    ours = requirement_lines(os.path.join(ROOT, "requirements.txt"))
    host_packages = {name_of(r) for r in requirement_lines(os.path.join(HOST, "requirements.txt"))}
    assert ours and all(">=" in r and "==" not in r for r in ours), ours
    assert not host_packages & {name_of(r) for r in ours}


def _recorded(name):
    path = os.path.join(sys.prefix, name)
    if not os.path.exists(path):
        pytest.fail(
            f"{path} is missing: scripts/bootstrap.sh records it while building the venv; run the tests "
            "through scripts/test.sh"
        )
    return path


def test_installing_requirements_into_the_hosts_environment_changes_no_installed_package():
    # scripts/bootstrap.sh ran `pip install --dry-run --report -r requirements.txt` on the host's
    # environment (its torch stack and its own requirements) before adding anything of ours.
    with open(_recorded("host-freeze.txt")) as f:
        installed = dict(line.strip().lower().replace("_", "-").split("==", 1) for line in f if "==" in line)
    with open(_recorded("install-report.json")) as f:
        report = json.load(f)
    would_install = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"] for item in report["install"]
    }
    assert "lycoris-lora" in would_install  # the report is of our requirements
    changed = {name: (installed[name], version) for name, version in would_install.items() if name in installed}
    assert changed == {}


def test_pyproject_is_what_comfyuis_registry_reads():
    config = extract_node_configuration(ROOT)
    assert config.project.name == "eridiffusion"
    assert config.project.version == __version__
    assert config.project.dependencies == requirement_lines(os.path.join(ROOT, "requirements.txt"))
    assert config.project.urls.repository.startswith("https://")
    assert config.tool_comfy.publisher_id and config.tool_comfy.display_name == "EriDiffusion"
    assert config.project.supported_comfyui_version == ">=0.3.75"
