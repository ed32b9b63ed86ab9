"""Issue 11, SIGKILL during checkpointing (and case 8): a run killed at random moments while it
writes a checkpoint every step leaves only whole files (every adapter, training state and loss
history loads), and the next run's start removes the temp files the killed writes left. Each run is a
process of its own, forked from one that started torch and ComfyUI once (killed_run.py)."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import safetensors.torch

from devkit.paths import ROOT
from eridiffusion.formats.atomic_file import TEMP_SUFFIX
from eridiffusion.formats.state_file import load_state

pytestmark = pytest.mark.one_host("a killed process's files and the next start's sweep")

TRIALS = 5


class Runs:
    """The process that forks the runs (killed_run.py): start() one, poll() or wait() for its exit status."""

    def __init__(self, base):
        self.base = base
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.killed_run", str(base)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, *request):
        self.process.stdin.write(" ".join(map(str, request)) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().strip()
        assert answer, f"the runs' process exited (status {self.process.wait()})"
        return answer

    def start(self, dataset, run_name, trial):
        log = self.base / f"run_{trial}.log"
        return int(self.ask("start", dataset, run_name, log)), log

    def poll(self, pid):
        answer = self.ask("poll", pid)
        return None if answer == "running" else int(answer)

    def wait(self, pid):
        return int(self.ask("wait", pid))

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


def wait_for_checkpoint(runs, pid, log, folder, timeout_s=300):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.path.isdir(folder) and any(f.endswith(".safetensors") for f in os.listdir(folder)):
            return
        if runs.poll(pid) is not None:
            raise AssertionError(f"the run exited before its first checkpoint: {log.read_text()}")
        time.sleep(0.02)
    raise AssertionError(f"no checkpoint in {folder} after {timeout_s} s")


def run_name(trial):
    """The folder trial `trial` trains in: each start takes the next free name."""
    return "killed" if trial == 1 else f"killed_{trial}"


def temp_files(output):
    return sorted(os.path.join(d, f) for d, _, files in os.walk(output) for f in files if f.endswith(TEMP_SUFFIX))


def test_runs_killed_while_checkpointing_leave_whole_files_and_the_next_start_sweeps_the_rest(photos, tmp_path):
    dataset, base = photos(1), tmp_path / "host"
    output = base / "output"
    chance = random.Random(11)
    left_behind = []
    base.mkdir()
    runs = Runs(base)
    try:
        for trial in range(1, TRIALS + 1):
            run_dir = output / run_name(trial)
            pid, log = runs.start(dataset, "killed", trial)  # its start sweeps what the trial before left
            try:
                wait_for_checkpoint(runs, pid, log, run_dir / "checkpoints")
                time.sleep(chance.uniform(0.0, 0.8))
            finally:
                os.kill(pid, signal.SIGKILL)
                assert runs.wait(pid) == -signal.SIGKILL
            if trial > 1:
                assert [p for p in temp_files(output) if p.startswith(str(output / run_name(trial - 1)) + os.sep)] == []
            left_behind.append(len(temp_files(output)))
            adapters = 0
            for name in sorted(os.listdir(run_dir / "checkpoints")):
                path = str(run_dir / "checkpoints" / name)
                if name.endswith(".safetensors"):
                    adapters += len(safetensors.torch.load_file(path)) > 0
                elif name.endswith(".training_state"):
                    assert load_state(path, path[: -len(".training_state")] + ".safetensors")["step"] >= 1
                else:
                    assert name.endswith(TEMP_SUFFIX), name
            assert adapters >= 1
            with open(run_dir / "loss.json") as f:
                assert isinstance(json.load(f)["loss"], list)
        pid, log = runs.start("-", "killed", "finisher")
        assert runs.wait(pid) == 0, log.read_text()
    finally:
        runs.close()
    assert temp_files(output) == []
    print(f"temp files left after each kill (before the next start swept them): {left_behind}")
