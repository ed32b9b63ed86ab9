"""One preflight: every refusal of a run is asked from one place in the product, and a refusal added to
the preflight fires wherever a run is started (the graph's LoRATrainer, `--dry-run`, `train`), before
the run's folder is made."""

import ast
import os
import sys

import pytest

from devkit.headless import CONFIGS, graph_prompt, write_yaml
from devkit.paths import ROOT
from devkit.workflow import execution_error, load_extension, run_prompt
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.run import preflight

PRODUCT = os.path.join(ROOT, "eridiffusion")
# The LoRA toolbox's verbs check their own inputs; its checks are not a run's.
TOOLBOX = ("lora_tools", os.path.join("headless", "lora_cli.py"), os.path.join("nodes", "lora_tools_nodes.py"))
# Validators of one value, asked wherever such a value is given (a settings dataclass, a value another
# object carries against its declaration, the caption fallback of LoadDataset's settings and of a loaded
# dataset, a tensor being written, a mask beside its image), not refusals of a run.
VALUE_CHECKS = {
    "check_settings",
    "check_value",
    "check_declared",
    "check_caption_fallback",
    "check_finite",
    "check_mask_fits",
}


def refusal_references(files):
    """{name: [file:line of each reference]} of every function named check_* defined in `files`: each
    call, and each use of its name elsewhere (an entry of the preflight's CHECKS)."""
    trees = {path: ast.parse(open(path, encoding="utf-8").read()) for path in files}
    defined = {
        node.name
        for tree in trees.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name.startswith("check_")
    }
    found = {name: [] for name in defined}
    for path, tree in trees.items():
        for node in ast.walk(tree):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if name in found:
                found[name].append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    return found


def run_files():
    for directory, _, names in os.walk(PRODUCT):
        for name in sorted(names):
            path = os.path.join(directory, name)
            if name.endswith(".py") and not any(part in os.path.relpath(path, PRODUCT) for part in TOOLBOX):
                yield path


def test_each_refusal_of_a_run_is_asked_from_one_place_in_the_product():
    references = refusal_references(list(run_files()))
    assert len(references) > 30
    assert {name for name in VALUE_CHECKS if not references.get(name)} == set()
    asked_elsewhere = {
        name: where for name, where in references.items() if len(where) != 1 and name not in VALUE_CHECKS
    }
    assert asked_elsewhere == {}


def test_a_refusal_asked_from_two_places_is_found(tmp_path):
    checks = tmp_path / "checks.py"
    checks.write_text("def check_a(x):\n    pass\n\ndef check_b(x):\n    pass\n\nCHECKS = (check_b,)\n")
    caller = tmp_path / "caller.py"
    caller.write_text("from checks import check_a\n\ndef run(x):\n    check_a(x)\n    check_a(x + 1)\n")
    found = refusal_references([str(checks), str(caller)])
    assert sorted(found) == ["check_a", "check_b"]
    assert len(found["check_a"]) == 2 and len(found["check_b"]) == 1


PROBE = "preflight probe: refused"


def refuse_every_run(request):
    raise EriDiffusionError(f"{PROBE} ({type(request.model.model).__name__}, {request.facts.samples} samples)")


@pytest.fixture
def probed_preflight(monkeypatch):
    """The preflight with one more refusal at its end, as a new check would be added: in this package and
    in the copy ComfyUI's custom-node loader imported under the checkout's folder name."""
    load_extension()
    copies = [m for name, m in sys.modules.items() if name.endswith("eridiffusion.training.run.preflight")]
    assert preflight in copies and len(copies) == 2
    for module in copies:
        monkeypatch.setattr(module, "CHECKS", (*module.CHECKS, refuse_every_run))


@pytest.fixture
def cli_in_this_process(monkeypatch, capsys):
    """main(["train", ...]) in this process (ComfyUI is started for the tests), ComfyUI's output and
    loras folders put back afterwards: (status, stderr)."""
    import folder_paths

    from eridiffusion.headless import cli

    monkeypatch.setattr("eridiffusion.runtime.start_host", lambda folder: folder)
    monkeypatch.setattr(folder_paths, "output_directory", folder_paths.get_output_directory())
    loras = folder_paths.folder_names_and_paths["loras"]
    monkeypatch.setitem(folder_paths.folder_names_and_paths, "loras", (list(loras[0]), loras[1]))

    def run(*args):
        status = cli.main(["train", *map(str, args)])
        return status, capsys.readouterr().err

    return run


def small_demo_config(tmp_path):
    with open(os.path.join(CONFIGS, "tiny_demo.yaml"), encoding="utf-8") as f:
        text = f.read().replace("../demo/data", os.path.join(ROOT, "demo", "data")).replace("steps: 200", "steps: 2")
    return write_yaml(tmp_path / "probe.yaml", text.replace("run_name: sks_dog", "run_name: preflight_probe"))


def test_a_refusal_added_to_the_preflight_fires_in_the_graph_in_dry_run_and_in_train_before_any_folder(
    probed_preflight, cli_in_this_process, tmp_path, comfy_dirs
):
    from eridiffusion.headless.run_config import load_run_config

    config = small_demo_config(tmp_path)
    load_extension()
    executor, _ = run_prompt(graph_prompt(load_run_config(config)))
    assert PROBE in (execution_error(executor) or "")
    assert "SDXL, 5 samples" in execution_error(executor)
    assert not os.path.exists(os.path.join(comfy_dirs["output"], "preflight_probe"))
    for args in (["--dry-run"], []):
        output = tmp_path / f"out{len(args)}"
        status, err = cli_in_this_process(config, "--output", output, *args)
        assert status == 2 and f"eridiffusion: error: {config}: {PROBE} (SDXL, 5 samples)" in err, err
        assert [name for name in os.listdir(output) if name != "loras"] == []
