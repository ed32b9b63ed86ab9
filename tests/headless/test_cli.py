"""The command line as a user meets it (subprocesses): --print-config, --dry-run, an ai-toolkit file,
Ctrl-C during a run, --resume auto, TensorBoard. The commands that stop early share one process of the
command line (conftest's command_line), as does the resumed run; the runs interrupted by a signal and the
ai-toolkit run (whose warnings are checked as a fresh process logs them) have their own."""

import json
import os
import signal
import time

import pytest
import yaml

from devkit.headless import CONFIGS, run_cli, start_cli, write_yaml
from devkit.paths import shared_datasets
from devkit.stock_comfyui import tiny_demo_lora_load
from eridiffusion.headless.schema import OPTIONAL_SECTIONS, section_settings

pytestmark = pytest.mark.one_host(
    "the command line's own behaviour (its training path: test_train_command.py, both hosts)"
)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def test_print_config_prints_every_key_of_every_section_with_the_nodes_default(tmp_path, command_line):
    config = write_yaml(tmp_path / "short.yaml", "model: tiny-sdxl\ndataset: {folder: photos}\ntrain: {rank: 4}\n")
    done = command_line.run("train", config, "--print-config", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    printed = yaml.safe_load(done.stdout)
    for section in ("dataset", "cache", "train", "save", "logging"):
        defaults = {name: setting.default for name, setting in section_settings(section).items()}
        assert printed[section] == {
            **defaults,
            **{"dataset": {"folder": str(tmp_path / "photos")}, "train": {"rank": 4}}.get(section, {}),
        }, section
    assert all(printed[section] is None for section in OPTIONAL_SECTIONS)
    assert printed["model"]["checkpoint"] == "tiny-sdxl"


def test_dry_run_prints_the_plan_and_trains_nothing(tmp_path, command_line):
    done = command_line.run(
        "train", os.path.join(CONFIGS, "tiny_demo.yaml"), "--dry-run", "--output", tmp_path / "out", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines())
    assert lines["model"].startswith("tiny-sdxl: ComfyUI SDXL -> SDXL")
    assert lines["buckets"] == "at 256: 256x256 x5"
    assert lines["steps"] == "200 x batch 1 x grad_accum 1 = 200 images seen, 40.0 epochs"
    assert lines["adapter"].startswith("lora rank 8 alpha 8 on ")
    assert os.listdir(tmp_path / "out") == []


AI_TOOLKIT = """
job: extension
config:
  name: "headless_ai_toolkit"
  process:
    - type: 'sd_trainer'
      training_folder: "output"
      device: cuda:0
      trigger_word: "sks"
      network: {{type: "lora", linear: 4, linear_alpha: 4}}
      save: {{dtype: float16, save_every: 250, max_step_saves_to_keep: 4, push_to_hub: false}}
      datasets:
        - folder_path: "{folder}"
          caption_ext: "txt"
          caption_dropout_rate: 0.05
          shuffle_tokens: false
          cache_latents_to_disk: true
          resolution: [ 64 ]
      train:
        batch_size: 1
        steps: 3
        gradient_accumulation_steps: 1
        train_unet: true
        train_text_encoder: false
        gradient_checkpointing: true
        noise_scheduler: "ddpm"
        optimizer: "adamw"
        lr: 1e-3
        ema_config: {{use_ema: true, ema_decay: 0.99}}
        dtype: fp32
      model:
        name_or_path: "tiny-sdxl"
        is_xl: true
meta:
  name: "[name]"
  version: '1.0'
"""


def test_ai_toolkit_config_trains_the_tiny_model_and_warns_once_about_what_it_ignores(tmp_path, caplog):
    folder = os.path.join(shared_datasets(), "dreambooth_dog")
    config = write_yaml(tmp_path / "ai_toolkit.yaml", AI_TOOLKIT.format(folder=folder))
    done = run_cli("train", config, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("warning:") == 1
    assert "3 setting(s) of" in done.stderr
    for key in ("meta", "config.process[0].device", "config.process[0].train.noise_scheduler"):
        assert f"\n  {key} (" in done.stderr
    run_dir = tmp_path / "output" / "headless_ai_toolkit"
    assert len(read_json(run_dir / "loss.json")["loss"]) == 3
    assert read_json(run_dir / "summary.json")["config"]["ema_decay"] == 0.99  # ema_config
    assert os.path.isfile(tmp_path / "output" / "loras" / "headless_ai_toolkit_raw.safetensors")
    assert tiny_demo_lora_load(tmp_path / "output" / "loras" / "headless_ai_toolkit.safetensors", caplog)[0] == []


def test_an_ai_toolkit_resolution_list_dry_runs_with_buckets_of_every_size_and_no_warning(tmp_path, command_line):
    folder = os.path.join(shared_datasets(), "dreambooth_dog")
    text = AI_TOOLKIT.format(folder=folder).replace("resolution: [ 64 ]", "resolution: [ 512, 768, 1024 ]")
    done = command_line.run("train", write_yaml(tmp_path / "sizes.yaml", text), "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    buckets = [line for line in done.stdout.splitlines() if line.startswith("buckets")]
    assert [line.split(":")[0] for line in buckets] == ["buckets  at 1024", "buckets  at 512", "buckets  at 768"]
    assert [line.split(": ")[1] for line in buckets] == ["1024x1024 x5", "512x512 x5", "768x768 x5"]  # 5 photos
    assert "datasets[0].resolution" not in done.stderr


INTERRUPTED = "headless_interrupted"


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A 1000-step run of the tiny demo, sent SIGINT once its first losses are written."""
    folder = tmp_path_factory.mktemp("interrupted")
    config = write_yaml(
        folder / "long.yaml",
        f"""
_base_: {os.path.join(CONFIGS, "tiny_demo.yaml")}
cache: {{resolution: 64}}
train: {{steps: 1000, run_name: {INTERRUPTED}}}
sample: null
""",
    )
    process = start_cli("train", config, "--output", folder / "out", cwd=folder)
    losses = folder / "out" / INTERRUPTED / "loss.json"
    deadline = time.monotonic() + 300
    while not losses.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    status = process.wait(timeout=300)
    stderr = (folder / "stderr.txt").read_text()
    return {
        "folder": folder,
        "config": config,
        "status": status,
        "stderr": stderr,
        "run_dir": folder / "out" / INTERRUPTED,
    }


def test_ctrl_c_stops_at_a_step_boundary_and_leaves_a_loadable_checkpoint_of_that_step(interrupted, caplog):
    assert interrupted["status"] == 130, interrupted["stderr"]
    steps = read_json(interrupted["run_dir"] / "summary.json")["steps"]
    assert 10 <= steps < 1000
    assert len(read_json(interrupted["run_dir"] / "loss.json")["loss"]) == steps
    checkpoint = interrupted["run_dir"] / "checkpoints" / f"{INTERRUPTED}_step{steps:06d}.safetensors"
    assert checkpoint.with_suffix(".training_state").exists()
    unmatched, patched, layers = tiny_demo_lora_load(checkpoint, caplog)
    assert unmatched == [] and patched == layers > 0
    assert f"stopped at step {steps} of 1000" in interrupted["stderr"]


def test_resume_auto_continues_the_newest_checkpoint_of_the_run(interrupted, command_line):
    stopped = read_json(interrupted["run_dir"] / "summary.json")["steps"]
    config = write_yaml(interrupted["folder"] / "longer.yaml", f"_base_: long.yaml\ntrain: {{steps: {stopped + 3}}}\n")
    done = command_line.run(
        "train", config, "--output", interrupted["folder"] / "out", "--resume", "auto", cwd=interrupted["folder"]
    )
    assert done.returncode == 0, done.stderr
    checkpoint = interrupted["run_dir"] / "checkpoints" / f"{INTERRUPTED}_step{stopped:06d}.safetensors"
    assert f"resuming from {checkpoint} at step {stopped}" in done.stderr
    resumed = interrupted["folder"] / "out" / f"{INTERRUPTED}_2"
    losses = read_json(resumed / "loss.json")["loss"]
    assert len(losses) == stopped + 3
    assert losses[:stopped] == read_json(interrupted["run_dir"] / "loss.json")["loss"]
    assert (resumed / "checkpoints" / f"{INTERRUPTED}_step{stopped + 3:06d}.safetensors").exists()


def test_second_ctrl_c_aborts_without_saving_the_lora(tmp_path):
    config = write_yaml(
        tmp_path / "long.yaml",
        f"""
_base_: {os.path.join(CONFIGS, "tiny_demo.yaml")}
cache: {{resolution: 64}}
train: {{steps: 1000, run_name: headless_aborted}}
sample: null
""",
    )
    process = start_cli("train", config, "--output", tmp_path / "out", cwd=tmp_path)
    stderr = tmp_path / "stderr.txt"
    deadline = time.monotonic() + 300
    while (
        not (tmp_path / "out" / "headless_aborted" / "loss.json").exists()
        and process.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    while "Ctrl-C again aborts" not in stderr.read_text() and process.poll() is None:
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=300) == 130
    assert "eridiffusion: aborted" in stderr.read_text()
    assert not (tmp_path / "out" / "loras").exists()


def tensorboard_installed():
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None


@pytest.mark.skipif(tensorboard_installed(), reason="tensorboard is installed here")
def test_tensorboard_asked_for_without_the_package_is_an_error_with_the_fix(tmp_path, command_line):
    config = write_yaml(
        tmp_path / "tb.yaml", f"_base_: {os.path.join(CONFIGS, 'tiny_demo.yaml')}\nlogging: {{tensorboard: true}}\n"
    )
    done = command_line.run("train", config, "--output", tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 2
    assert "logging.tensorboard is true, but TensorBoard cannot be used here" in done.stderr
    assert "pip install tensorboard" in done.stderr
    assert os.listdir(tmp_path / "out") == []  # refused before any work


@pytest.mark.skipif(not tensorboard_installed(), reason="needs the tensorboard package")
def test_tensorboard_event_files_hold_the_losses_of_each_step(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from eridiffusion.headless.terminal import CtrlC, TrainingProgress

    progress = TrainingProgress(20, 0, str(tmp_path), CtrlC(), tensorboard=True)
    progress.on_progress(10, 20, [float(i) for i in range(10)], {"lr": 1e-3})
    progress.on_progress(20, 20, [float(i) for i in range(10, 20)], {"lr": 1e-3})
    progress.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(i + 1, float(i)) for i in range(20)]
