"""Block swap as users reach it: `train.blocks_to_swap` / `train.vram_budget_gib` in a config run by
the command line (a subprocess: --dry-run's plan, a run that samples while its blocks pass through the
ring) and the same settings as MemoryOptions' widgets through ComfyUI's executor."""

import json
import os

import pytest

from devkit.headless import CONFIGS, graph_prompt, write_yaml
from devkit.stock_comfyui import tiny_demo_lora_load
from devkit.workflow import execution_error, load_extension, run_prompt

pytestmark = pytest.mark.one_host(
    "block swap's plan and ring are EriDiffusion's own (tests/training/memory/test_block_swap.py: both hosts' classes)"
)

RUN_NAME = "swapped_tiny_demo"
STEPS = 3
SWAPPED = 6


@pytest.fixture(scope="module")
def swapped_demo(tmp_path_factory, command_line):
    """configs/tiny_demo.yaml at 64 px for 3 steps with 6 of its blocks in CPU memory, sampling at step 3."""
    folder = tmp_path_factory.mktemp("swapped_cli")
    config = write_yaml(
        folder / "swapped.yaml",
        f"""
_base_: {os.path.join(CONFIGS, "tiny_demo.yaml")}
cache: {{resolution: 64}}
train: {{steps: {STEPS}, run_name: {RUN_NAME}, gradient_checkpointing: true, blocks_to_swap: {SWAPPED}}}
sample: {{every: 3, steps: 2, width: 64, height: 64, prompts: [a photo of sks dog]}}
""",
    )
    done = command_line.run("train", config, "--output", folder / "out", cwd=folder)
    assert done.returncode == 0, done.stderr
    return {"config": config, "folder": folder, "output": folder / "out"}


def read_json(path):
    with open(path) as f:
        return json.load(f)


def test_the_dry_run_plans_the_blocks_in_cpu_memory(swapped_demo, command_line):
    done = command_line.run("train", swapped_demo["config"], "--dry-run", cwd=swapped_demo["folder"])
    assert done.returncode == 0, done.stderr
    memory = next(line for line in done.stdout.splitlines() if line.startswith("memory"))
    assert f"blocks_to_swap {SWAPPED} of its " in memory and "weights on the device" in memory


def test_a_run_with_blocks_swapped_samples_and_saves_a_lora_stock_comfyui_loads(swapped_demo, caplog):
    run_dir = swapped_demo["output"] / RUN_NAME
    summary = read_json(run_dir / "summary.json")
    assert summary["block_swap"]["blocks_in_ring"] == SWAPPED and summary["steps"] == STEPS
    assert summary["block_swap"]["host_to_device_gib_per_forward"] > 0
    assert os.listdir(run_dir / "samples") == ["step_3_0.png"]
    path = swapped_demo["output"] / "loras" / "eridiffusion" / "sks_dog.safetensors"
    unmatched, patched, layers = tiny_demo_lora_load(path, caplog)
    assert unmatched == [] and patched == layers > 0


def test_the_node_graph_with_memory_options_swapping_trains_what_the_command_line_trained(swapped_demo, comfy_dirs):
    from eridiffusion.headless.run_config import load_run_config

    load_extension()
    executor, _ = run_prompt(graph_prompt(load_run_config(swapped_demo["config"])))
    assert executor.success, execution_error(executor)
    graph = read_json(os.path.join(comfy_dirs["output"], RUN_NAME, "summary.json"))
    assert graph["block_swap"]["blocks_in_ring"] == SWAPPED
    cli_losses = read_json(swapped_demo["output"] / RUN_NAME / "loss.json")["loss"]
    graph_losses = read_json(os.path.join(comfy_dirs["output"], RUN_NAME, "loss.json"))["loss"]
    assert len(graph_losses) == STEPS and cli_losses == pytest.approx(graph_losses, abs=1e-6, rel=0)
