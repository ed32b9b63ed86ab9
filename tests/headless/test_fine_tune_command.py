"""`train: {method: full_finetune}` from the command line (a subprocess): the same request as LoRATrainer's
algorithm full, its --dry-run plan naming the weights it trains, the diffusion model saved where UNETLoader
reads it, and a method the run cannot be refused by the file and key. The commands that stop early share
one process of the command line (conftest's command_line), and so does the run that trains."""

import json
import os

import pytest
import safetensors

from devkit.headless import refused_train, write_yaml
from devkit.paths import shared_datasets

RUN_NAME = "headless_fine_tune"


def config_text(train):
    dog = os.path.join(shared_datasets(), "dreambooth_dog")
    return f"""
model: tiny-sd15
dataset: {{folder: {dog}}}
cache: {{resolution: 64}}
train: {{{train}}}
save: {{filename_prefix: fine_tunes/dog, dtype: fp32}}
"""


FULL = "method: full_finetune, steps: 3, learning_rate: 1.0e-3, dtype: fp32, gradient_checkpointing: false, "


def test_dry_run_of_a_full_finetune_prints_the_weights_it_trains_and_writes_nothing(tmp_path, command_line):
    config = write_yaml(tmp_path / "full.yaml", config_text(FULL + "targets: all-linear"))
    done = command_line.run("train", config, "--dry-run", "--output", tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines())
    assert lines["weights"].startswith("full fine-tune of ") and "trained as fp32 copies" in lines["weights"]
    assert "adapter" not in lines and os.listdir(tmp_path / "out") == []


def test_dry_run_of_a_bf16_fine_tune_names_its_copies_and_their_rounding(tmp_path, command_line):
    config = write_yaml(tmp_path / "bf16.yaml", config_text(FULL + "fine_tune_dtype: bf16, targets: all-linear"))
    done = command_line.run("train", config, "--dry-run", "--output", tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines())
    assert lines["weights"].endswith("trained as bf16 copies (updates rounded stochastically)")
    assert os.listdir(tmp_path / "out") == []


def test_train_saves_the_fine_tuned_diffusion_model_where_unetloader_reads_it(tmp_path, command_line):
    # (with the fused backward, Adafactor and bf16 weights, as a full fine-tune on a small card runs)
    fused = "fused_backward: true, optimizer: Adafactor, fine_tune_dtype: bf16, "
    config = write_yaml(tmp_path / "full.yaml", config_text(FULL + fused + f"run_name: {RUN_NAME}"))
    done = command_line.run("train", config, "--output", tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "out" / "diffusion_models" / "fine_tunes" / "dog.safetensors"
    with safetensors.safe_open(path, "pt") as f:
        assert f.metadata()["eridiffusion_trained"] == "weights"
        assert any(key.startswith("output_blocks.") for key in f.keys())  # (the whole model, UNETLoader's names)
    with open(tmp_path / "out" / RUN_NAME / "summary.json") as f:
        summary = json.load(f)
    assert summary["config"]["adapter"]["algorithm"] == "full"
    assert summary["config"]["fused_backward"] is True and summary["config"]["optimizer"] == "Adafactor"
    precision = {"fine_tune_dtype": "bf16", "sharding": "none", "stochastic_rounding": True}
    assert summary["config"]["precision"] == precision


@pytest.mark.parametrize(
    "train, error",
    [
        ("method: full_tune", "train.method 'full_tune' unknown; choose one of lora, full_finetune; did you mean"),
        ("method: full_finetune, algorithm: lokr", "train.method full_finetune and train.algorithm lokr ask for"),
        (FULL + "text_encoder_lr: 1.0e-5", "algorithm full trains the diffusion model's own weights alone"),
        (FULL + "fused_backward: true, on_nan: skip", "fused_backward steps each tensor as its gradient completes"),
        ("algorithm: lora, fine_tune_dtype: bf16", "fine_tune_dtype bf16 holds algorithm full's trained weights"),
        (FULL + "sharding: fsdp", "sharding fsdp splits the trained weights over the processes of a run that torchrun"),
    ],
)
def test_a_full_finetune_the_run_cannot_do_is_refused_by_file_and_key(tmp_path, train, error, command_line):
    config = write_yaml(tmp_path / "bad.yaml", config_text(train))
    message, left = refused_train(config, tmp_path / "out", "--dry-run", cwd=tmp_path, process=command_line)
    assert error in message and left == []
