"""A run's checkpoints written on its writer thread (background_writes.py): the steps go on while a checkpoint is
written, every file a run names is whole when it returns or stops (an error, Ctrl-C), and a failed write stops
the run naming the file (tiny SD1.5, LoRA)."""

import os
import threading
import time

import pytest
import torch

from eridiffusion.errors import EriDiffusionError
from eridiffusion.formats.state_file import load_state, state_path
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.run import checkpoints
from eridiffusion.training.run.background_writes import BackgroundWrites
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import TrainingHooks, train_lora

SLOW = 0.6  # seconds each state file's write takes here: longer than the tiny model's steps


def config(**values):
    settings = dict(
        steps=6,
        learning_rate=1e-3,
        dtype="fp32",
        gradient_checkpointing=False,
        log_every=1,
        save_every=2,
        cuda_graphs="off",
        adapter=AdapterSpec(rank=4, alpha=4.0),
        run_name="writes",
    )
    return TrainConfig(**{**settings, **values})


@pytest.fixture
def slow_writes(monkeypatch):
    """Each checkpoint's state file written SLOW seconds late, on whichever thread writes it: {"threads": the
    writing threads' names, "spans": [(start, end)] of each write}."""
    seen = {"threads": [], "spans": []}
    write_state = checkpoints.write_state

    def slow(path, content):
        started = time.perf_counter()
        seen["threads"].append(threading.current_thread().name)
        time.sleep(SLOW)
        write_state(path, content)
        seen["spans"].append((started, time.perf_counter()))

    monkeypatch.setattr(checkpoints, "write_state", slow)
    return seen


def whole_checkpoints(folder, names):
    """Each checkpoint of `names` in `folder` and its training state, read back whole."""
    import safetensors.torch

    for name in names:
        path = os.path.join(folder, "checkpoints", name)
        assert safetensors.torch.load_file(path)
        load_state(state_path(path), path)


@pytest.mark.parametrize("lora_stack", ["sd15"], indirect=True)
def test_the_steps_go_on_while_a_checkpoint_is_written_and_the_run_returns_its_files_whole(
    lora_stack, slow_writes, tmp_path
):
    stepped = []
    hooks = TrainingHooks(on_progress=lambda step, *_: stepped.append((step, time.perf_counter())))
    with torch.inference_mode(False):
        result = train_lora(lora_stack["model"], lora_stack["data"], config(), str(tmp_path), hooks=hooks)
    assert len(slow_writes["spans"]) == 3 and set(slow_writes["threads"]) != {threading.current_thread().name}
    # a step finished while the checkpoint of step 2 was being written
    start, end = slow_writes["spans"][0]
    assert any(start < at < end for step, at in stepped if step > 2), (slow_writes["spans"], stepped)
    names = [f"writes_step{step:06d}.safetensors" for step in (2, 4, 6)]
    assert [os.path.basename(path) for path in result.checkpoints] == names
    whole_checkpoints(tmp_path, names)


@pytest.mark.parametrize("lora_stack", ["sd15"], indirect=True)
def test_a_run_stopped_by_ctrl_c_mid_write_finishes_that_checkpoint(lora_stack, slow_writes, tmp_path):
    reported = []

    def interrupt():  # at the start of step 3: step 2's checkpoint was handed over, its write not done (SLOW)
        if 2 in reported:
            raise KeyboardInterrupt

    hooks = TrainingHooks(on_progress=lambda step, *_: reported.append(step), check_cancel=interrupt)
    with pytest.raises(KeyboardInterrupt), torch.inference_mode(False):
        train_lora(lora_stack["model"], lora_stack["data"], config(), str(tmp_path), hooks=hooks)
    assert reported == [1, 2] and len(slow_writes["spans"]) == 1  # (finished before the interrupt went on)
    whole_checkpoints(tmp_path, ["writes_step000002.safetensors"])


@pytest.mark.parametrize("lora_stack", ["sd15"], indirect=True)
def test_a_write_that_fails_stops_the_run_naming_the_file(lora_stack, tmp_path, monkeypatch):
    def full_disk(path, content):
        raise EriDiffusionError(f"cannot write {state_path(path)}: No space left on device; the disk is full.")

    monkeypatch.setattr(checkpoints, "write_state", full_disk)
    with pytest.raises(EriDiffusionError, match=r"writes_step000002.*the disk is full"), torch.inference_mode(False):
        train_lora(lora_stack["model"], lora_stack["data"], config(), str(tmp_path))


def test_jobs_run_in_turn_each_timed_and_a_failure_is_raised_at_the_next_hand_over():
    phases, order = {}, []
    writes = BackgroundWrites(phases)
    writes.hand_over("a", lambda: (time.sleep(0.05), order.append("a")))
    writes.hand_over("b", lambda: order.append("b"))  # (waits for a)
    writes.wait()
    assert order == ["a", "b"] and set(phases) == {"a", "b"} and phases["a"] >= 0.05

    def fails():
        raise OSError("disk gone")

    writes.hand_over("c", fails)
    with pytest.raises(OSError, match="disk gone"):
        writes.hand_over("d", lambda: order.append("d"))
    assert order == ["a", "b"]  # (d was not handed over)
    writes.hand_over("e", fails)
    writes.close(failing=True)  # (logged: the run's own error goes on)
    writes.hand_over("f", fails)
    with pytest.raises(OSError):
        writes.close()
