"""A run spread over processes with torch.distributed, started by torchrun as a user starts it (on the
CPU, gloo): 2 processes x batch 1 train what 1 process x batch 2 trains, rank 0 alone writes files,
a checkpoint of it continues in one process, and `--gpus` without GPUs says what to do instead."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from devkit.headless import CONFIGS, cli_env, run_cli, write_yaml
from eridiffusion.errors import EriDiffusionError
from eridiffusion.headless.launch import check_gpus, torchrun_command

pytestmark = pytest.mark.one_host("torch.distributed under torchrun (gloo)")

RUN = "multi"
STEPS = 4

# Two settings make the weights comparable element by element. AdamW's first steps are sign steps
# (m/sqrt(v) is +-1), so an element whose gradient is rounding noise (one GEMM over a batch of 2
# and two of 1 summed across processes round differently) moves by +-lr either way; Adafactor
# divides by row and column moments instead and carries such a gradient as it is. And SDXL's own
# default targets (attention): tiny_demo's all-linear adds the time-embedding layers, whose whole
# gradient the tiny model's one-channel GroupNorm groups cancel to rounding noise.
SETTINGS = f"""
_base_: {os.path.join(CONFIGS, "tiny_demo.yaml")}
cache: {{resolution: 64}}
train: {{steps: {STEPS}, save_every: 2, run_name: {RUN}, batch_size: 2, targets: attention, optimizer: Adafactor}}
sample: {{every: 2, steps: 2, width: 64, height: 64}}
"""


def read_json(path):
    with open(path) as f:
        return json.load(f)


def tree(folder):
    """Every file and folder under `folder`, relative to it."""
    found = set()
    for root, dirs, files in os.walk(folder):
        found.update(os.path.relpath(os.path.join(root, name), folder) for name in dirs + files)
    return found


def checkpoint(output, step, run=RUN):
    return output / run / "checkpoints" / f"{RUN}_step{step:06d}.safetensors"


def largest_difference(path_a, path_b):
    a, b = load_file(str(path_a)), load_file(str(path_b))
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.fixture(scope="module", autouse=True)
def processes_on_the_cpu():
    """Every run here is a gloo run on the CPU, on a GPU machine too (where one GPU would refuse two
    processes, rightly: the launch checks are tested without GPUs below)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CUDA_VISIBLE_DEVICES", "")
        yield


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same settings run by one process at batch_size 2 and by torchrun's 2 processes at 1."""
    folder = tmp_path_factory.mktemp("multi_gpu")
    one = write_yaml(folder / "one.yaml", SETTINGS)
    two = write_yaml(folder / "two.yaml", "_base_: one.yaml\ntrain: {batch_size: 1}\n")
    single = run_cli("train", one, "--output", folder / "single", cwd=folder)
    assert single.returncode == 0, single.stderr
    command = torchrun_command(two, 2, output=str(folder / "pair"))
    pair = subprocess.run(command, cwd=folder, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert pair.returncode == 0, pair.stderr
    return {"folder": folder, "command": command, "stderr": pair.stderr, "one": one}


def test_the_launch_command_is_torchrun_of_the_module_with_one_process_per_gpu(runs):
    assert runs["command"] == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "eridiffusion",
        "train",
        str(runs["folder"] / "two.yaml"),
        "--output",
        str(runs["folder"] / "pair"),
    ]


def test_two_processes_at_batch_1_train_what_one_process_at_batch_2_trains(runs):
    outputs = runs["folder"] / "single", runs["folder"] / "pair"
    single, pair = (output / RUN for output in outputs)
    losses = read_json(pair / "loss.json")["loss"]
    assert len(losses) == STEPS
    assert losses == pytest.approx(read_json(single / "loss.json")["loss"], abs=1e-5, rel=0)
    for step in (2, STEPS):
        assert largest_difference(*(checkpoint(output, step) for output in outputs)) < 1e-5
    summary, reference = read_json(pair / "summary.json"), read_json(single / "summary.json")
    assert summary["eval_loss_after"] == pytest.approx(reference["eval_loss_after"], abs=1e-6, rel=0)
    assert (summary["processes"], reference["processes"]) == (2, 1)
    assert len(summary["peak_memory_gib_per_process"]) == 2
    assert "model tiny-sdxl: SDXL in 2 processes (rank 0 on cpu)" in runs["stderr"]


def test_only_rank_0_writes_the_output_folder_holds_what_one_process_writes(runs):
    single, pair = tree(runs["folder"] / "single"), tree(runs["folder"] / "pair")
    assert pair == single
    # the run folder, its samples and checkpoints, the LoRA, and one shared latent cache: nothing twice
    assert {f"{RUN}/samples/step_4_1.png", f"{RUN}/checkpoints/{RUN}_step000002.training_state"} <= pair
    assert not any(name.startswith(f"{RUN}_2") for name in pair)
    assert runs["stderr"].count("step 2: samples") == 1


def test_a_checkpoint_of_two_processes_continues_in_one_at_the_same_global_batch(runs):
    folder = runs["folder"]
    resumed = run_cli(
        "train", runs["one"], "--output", folder / "resumed", "--resume", checkpoint(folder / "pair", 2), cwd=folder
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "at step 2 (4 samples seen, by 2 processes)" in resumed.stderr
    assert read_json(folder / "resumed" / RUN / "loss.json")["loss"] == pytest.approx(
        read_json(folder / "pair" / RUN / "loss.json")["loss"], abs=1e-5, rel=0
    )
    assert largest_difference(checkpoint(folder / "resumed", STEPS), checkpoint(folder / "pair", STEPS)) < 1e-5


def test_a_checkpoint_of_two_processes_resumed_at_another_global_batch_is_refused_with_the_fix(runs):
    from eridiffusion.headless import run
    from eridiffusion.headless.run_config import load_run_config

    folder = runs["folder"]
    config = load_run_config(str(folder / "two.yaml"))  # batch_size 1, in this one process
    with pytest.raises(EriDiffusionError) as refused:  # before any model loads
        run.requested_run(config, str(checkpoint(folder / "pair", 2)), str(folder))
    assert "the global batch (batch_size x processes) was 2 x 1 = 2 and is 1 x 1 = 1 here" in str(refused.value)
    assert "set batch_size to 2 for 1 process(es)" in str(refused.value)


def test_ctrl_c_under_torchrun_stops_every_process_at_one_step_and_rank_0_saves_it(tmp_path):
    """torchrun hands its Ctrl-C to each process; they agree on the step (else one would wait for the
    other's all-reduce forever) and rank 0 saves that step."""
    config = write_yaml(
        tmp_path / "long.yaml",
        f"_base_: {os.path.join(CONFIGS, 'tiny_demo.yaml')}\ncache: {{resolution: 64}}\n"
        "train: {steps: 1000, run_name: stopped}\nsample: null\n",
    )
    with open(tmp_path / "stderr.txt", "w") as err:
        launcher = subprocess.Popen(
            torchrun_command(config, 2, output=str(tmp_path / "out")),
            cwd=tmp_path,
            env=cli_env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        losses, deadline = tmp_path / "out" / "stopped" / "loss.json", time.monotonic() + 300
        while not losses.exists() and launcher.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        launcher.send_signal(signal.SIGINT)
        launcher.wait(timeout=300)
    stderr = (tmp_path / "stderr.txt").read_text()
    steps = read_json(tmp_path / "out" / "stopped" / "summary.json")["steps"]
    assert 10 <= steps < 1000, stderr
    assert len(read_json(losses)["loss"]) == steps
    saved = tmp_path / "out" / "stopped" / "checkpoints" / f"stopped_step{steps:06d}.training_state"
    assert saved.exists()
    assert stderr.count(f"stopped at step {steps} of 1000") == 1
    assert stderr.count("Ctrl-C: stopping after this step") == 1  # rank 0 alone says so


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: --gpus would start torchrun")
def test_gpus_without_a_gpu_is_an_error_naming_the_torchrun_command_for_the_cpu(tmp_path):
    config = write_yaml(tmp_path / "c.yaml", SETTINGS)
    done = run_cli("train", config, "--gpus", "2", cwd=tmp_path)
    assert done.returncode == 2
    assert "--gpus 2: this machine has no CUDA GPU" in done.stderr
    assert "python -m torch.distributed.run --standalone --nproc_per_node=2 -m eridiffusion train CONFIG" in done.stderr
    assert not os.path.exists(tmp_path / "output")


def test_gpus_is_checked_against_the_machine_and_torchrun():
    check_gpus(2, 2, started_by_torchrun=False)
    with pytest.raises(EriDiffusionError, match=r"--gpus 4: this machine has 2 CUDA GPU\(s\).*at most 2"):
        check_gpus(4, 2, started_by_torchrun=False)
    with pytest.raises(EriDiffusionError, match="started by torchrun.*leave --gpus out"):
        check_gpus(2, 8, started_by_torchrun=True)
    with pytest.raises(EriDiffusionError, match="--gpus 1: this machine has no CUDA GPU; leave --gpus out"):
        check_gpus(1, 0, started_by_torchrun=False)
