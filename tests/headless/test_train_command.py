"""`eridiffusion train configs/tiny_demo.yaml` as a user runs it (a subprocess), shortened for two
CPU cores through a `_base_` file, against the same settings run as a node graph."""

import ast
import json
import os
import subprocess
import sys

import pytest

from devkit.headless import CONFIGS, cli_env, graph_prompt, run_cli, write_yaml
from devkit.stock_comfyui import tiny_demo_lora_load
from devkit.workflow import execution_error, load_extension, run_prompt

RUN_NAME = "headless_tiny_demo"
STEPS = 4


@pytest.fixture(scope="module")
def quick_demo(tmp_path_factory):
    """configs/tiny_demo.yaml at 64 px for 4 steps (samples every 2), trained by the command line."""
    folder = tmp_path_factory.mktemp("tiny_demo_cli")
    config = write_yaml(
        folder / "quick.yaml",
        f"""
_base_: {os.path.join(CONFIGS, "tiny_demo.yaml")}
cache: {{resolution: 64}}
train: {{steps: {STEPS}, run_name: {RUN_NAME}}}
sample: {{every: 2, steps: 2, width: 64, height: 64}}
""",
    )
    done = run_cli("train", config, "--output", folder / "out", cwd=folder)
    assert done.returncode == 0, done.stderr
    return {"config": config, "output": folder / "out", "stderr": done.stderr}


def read_json(path):
    with open(path) as f:
        return json.load(f)


def test_train_command_writes_the_run_folder_the_node_writes(quick_demo):
    run_dir = quick_demo["output"] / RUN_NAME
    assert {"loss.json", "loss.png", "summary.json", "config.yaml"} <= set(os.listdir(run_dir))
    assert sorted(os.listdir(run_dir / "checkpoints")) == [
        f"{RUN_NAME}_step{STEPS:06d}.safetensors",
        f"{RUN_NAME}_step{STEPS:06d}.training_state",
    ]
    assert sorted(os.listdir(run_dir / "samples")) == ["step_2_0.png", "step_2_1.png", "step_4_0.png", "step_4_1.png"]
    assert read_json(run_dir / "summary.json")["steps"] == STEPS
    samples = f"out/{RUN_NAME}/samples/step_2_0.png, out/{RUN_NAME}/samples/step_2_1.png"
    assert f"step 2: samples {samples}" in quick_demo["stderr"]
    assert f"checkpoint out/{RUN_NAME}/checkpoints/{RUN_NAME}_step{STEPS:06d}.safetensors" in quick_demo["stderr"]


def test_train_command_lora_loads_in_stock_comfyui_with_every_key_matched(quick_demo, caplog):
    path = quick_demo["output"] / "loras" / "eridiffusion" / "sks_dog.safetensors"
    unmatched, patched, layers = tiny_demo_lora_load(path, caplog)
    assert unmatched == [] and patched == layers > 0


def test_train_command_and_the_node_graph_give_the_same_losses(quick_demo, comfy_dirs):
    from eridiffusion.headless.run_config import load_run_config

    load_extension()
    executor, _ = run_prompt(graph_prompt(load_run_config(quick_demo["config"])))
    assert executor.success, execution_error(executor)
    cli = read_json(quick_demo["output"] / RUN_NAME / "summary.json")
    graph = read_json(os.path.join(comfy_dirs["output"], RUN_NAME, "summary.json"))
    cli_losses = read_json(quick_demo["output"] / RUN_NAME / "loss.json")["loss"]
    graph_losses = read_json(os.path.join(comfy_dirs["output"], RUN_NAME, "loss.json"))["loss"]
    assert len(cli_losses) == len(graph_losses) == STEPS
    assert cli_losses == pytest.approx(graph_losses, abs=1e-6, rel=0)
    assert cli["eval_loss_after"] == pytest.approx(graph["eval_loss_after"], abs=1e-6, rel=0)


def test_resume_auto_takes_the_checkpoint_furthest_on_not_the_one_touched_last(tmp_path):
    from eridiffusion.headless.run import newest_checkpoint

    def checkpoint(folder, step, when):
        os.makedirs(tmp_path / folder / "checkpoints", exist_ok=True)
        path = tmp_path / folder / "checkpoints" / f"run_step{step:06d}.safetensors"
        for file in (path, path.with_suffix(".training_state")):
            file.write_bytes(b"")
            os.utime(file, (when, when))
        return str(path)

    furthest = checkpoint("run", 20, when=1000)
    checkpoint("run", 10, when=3000)  # copied back, or touched, after the run went on
    checkpoint("run_2", 5, when=2000)
    (tmp_path / "run" / "checkpoints" / "run_step000030.safetensors").write_bytes(b"")  # no state beside it
    assert newest_checkpoint(str(tmp_path), "run") == furthest
    later = checkpoint("run_2", 20, when=4000)  # the same step in a later folder: the one written last
    assert newest_checkpoint(str(tmp_path), "run") == later


# The command line's main() in a subprocess that then prints the ComfyUI modules it imported.
MODULES_AFTER_MAIN = (
    "import sys\n"
    "from eridiffusion.headless.cli import main\n"
    "status = main(sys.argv[1:])\n"
    "print(sorted(name for name in sys.modules if name.split('.')[0] in ('comfy', 'comfy_api', 'nodes')))\n"
    "sys.exit(status)\n"
)
# What reading a config and ComfyUI's folders take of the host: its command-line arguments, its folder
# registry and the patcher's extension points (no model code, no device).
LIGHT_HOST_MODULES = {"comfy", "comfy.cli_args", "comfy.options", "comfy.patcher_extension"}


@pytest.mark.parametrize(
    "text, error",
    [
        ("save: {filename_prefix: ../x}\n", "SaveLoRA filename_prefix '../x' must be a relative name"),
        ("train: {learning_rate: 5.0}\n", "learning_rate 5 is above 1, the most AdamW takes"),
    ],
    ids=["save prefix", "train settings"],
)
def test_a_config_refused_before_any_model_loads_imports_none_of_comfyuis_models(text, error, tmp_path):
    config = write_yaml(tmp_path / "run.yaml", f"_base_: {os.path.join(CONFIGS, 'tiny_demo.yaml')}\n{text}")
    done = subprocess.run(
        [sys.executable, "-c", MODULES_AFTER_MAIN, "train", config, "--output", str(tmp_path / "out")],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 2 and error in done.stderr, done.stderr
    assert set(ast.literal_eval(done.stdout.strip().splitlines()[-1])) <= LIGHT_HOST_MODULES


@pytest.mark.parametrize(
    "text, named",
    [
        ("dataset: {folder: a_file.txt}\n", "dataset: dataset folder {tmp}/a_file.txt is a file, not a folder"),
        ("save: {filename_prefix: ../x}\n", "save: SaveLoRA filename_prefix '../x' must be a relative name"),
        ("train: {text_encoder_lr: 1.0e-4, text_encoders: t5xxl}\n", "text_encoders names 't5xxl', which the"),
    ],
    ids=["dataset folder", "save prefix", "text encoder"],
)
def test_a_refused_value_names_the_config_file_and_its_section(text, named, tmp_path):
    # the nodes' own refusals (LoadDataset's, SaveLoRA's, the preflight's) know no file: the command line adds it
    (tmp_path / "a_file.txt").write_text("")
    config = write_yaml(tmp_path / "run.yaml", f"_base_: {os.path.join(CONFIGS, 'tiny_demo.yaml')}\n{text}")
    done = run_cli("train", config, "--dry-run", "--output", tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"eridiffusion: error: {config}: {named.format(tmp=tmp_path)}" in done.stderr, done.stderr
