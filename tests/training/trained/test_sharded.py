"""A full fine-tune with its weights sharded over torchrun's processes (sharding fsdp, trained/sharded.py),
on the CPU with gloo: 2 processes at batch 1 train the tiny FLUX.1 [dev] as 1 process at batch 2, a run
resumed from its middle checkpoint (the model file, the training state, the optimizer's shards) ends
where the straight run ends, rank 0 writes each checkpoint whole; and what sharding cannot do is refused
before anything loads."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from devkit.headless import cli_env
from devkit.sharded_runs import STEPS, fine_tune
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.run.distributed import TrainingProcesses
from eridiffusion.training.run.precision import PrecisionSpec
from eridiffusion.training.run.preflight import SETTINGS_CHECKS, preflight
from eridiffusion.training.run.request import RunRequest
from eridiffusion.training.run.resume import load_resume_point
from eridiffusion.training.trained import check_sharded_inputs, check_sharding

pytestmark = pytest.mark.one_host("torch.distributed under torchrun (gloo)")

FSDP = PrecisionSpec(sharding="fsdp")
# AdamW's step divides by the root of its second moment: an element whose gradient is rounding noise (one
# batch of 2 against two of 1, reduce-scattered) moves by a share of the learning rate (1e-3) either way
WEIGHTS_TOLERANCE = 5e-5


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """devkit.sharded_runs under torchrun's 2 processes: the sharded run, its resumed half, and rank 0's
    run in one process at batch 2."""
    folder = tmp_path_factory.mktemp("sharded")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += ["-m", "devkit.sharded_runs", str(folder)]
    env = {**cli_env(), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    with open(folder / "runs.json") as f:
        return {"folder": folder, **json.load(f)}


def last_checkpoint(runs, name):
    return load_file(runs[name]["checkpoints"][-1])


def test_two_sharded_processes_at_batch_1_train_what_one_process_at_batch_2_trains(runs):
    sharded, one = runs["sharded"], runs["one"]
    assert len(sharded["losses"]) == STEPS
    assert sharded["losses"] == pytest.approx(one["losses"], abs=1e-5, rel=0)
    # the gradients averaged over the processes, not summed (AdamW's updates alone would not tell)
    assert len(sharded["gradient_norms"]) == STEPS
    assert sharded["gradient_norms"] == pytest.approx(one["gradient_norms"], rel=1e-4)
    assert sharded["eval_loss_after"] == pytest.approx(one["eval_loss_after"], abs=1e-5, rel=0)
    assert [step for step, _ in sharded["validation"]] == [STEPS // 2, STEPS]  # (measured by every process)
    assert [v for _, v in sharded["validation"]] == pytest.approx([v for _, v in one["validation"]], abs=1e-5)
    assert sharded["trained"] == one["trained"] and len(sharded["trained"]) == 16  # (2 blocks x qkv, proj x img, txt)
    a, b = last_checkpoint(runs, "sharded"), last_checkpoint(runs, "one")
    assert a.keys() == b.keys()
    difference = max((a[k] - b[k]).abs().max().item() for k in a)
    print(f"largest weight difference {difference:.3g}")
    assert difference < WEIGHTS_TOLERANCE
    moved = [k for k in sharded["trained"] if not torch.equal(a[k], load_file(runs["sharded"]["checkpoints"][0])[k])]
    assert len(moved) == 16  # (the second half trained them all)


def test_a_sharded_run_resumed_from_its_middle_checkpoint_ends_bit_for_bit_where_the_straight_run_ends(runs):
    straight, resumed = runs["sharded"], runs["resumed"]
    assert resumed["losses"] == straight["losses"]
    assert resumed["gradient_norms"] == straight["gradient_norms"][STEPS // 2 :]
    assert resumed["eval_loss_after"] == straight["eval_loss_after"]
    assert resumed["validation"] == straight["validation"] and resumed["best"]["step"] == straight["best"]["step"]
    a, b = last_checkpoint(runs, "sharded"), last_checkpoint(runs, "resumed")
    assert a.keys() == b.keys() and [k for k in a if not torch.equal(a[k], b[k])] == []


def test_a_checkpoint_is_the_whole_model_beside_the_optimizer_s_shards_of_each_process(runs):
    checkpoints = runs["folder"] / "sharded" / "checkpoints"
    middle = f"sharded_step{STEPS // 2:06d}"
    assert sorted(os.listdir(checkpoints)) == sorted(
        [
            f"{name}{suffix}"
            for name in (middle, f"sharded_step{STEPS:06d}")
            for suffix in (".safetensors", ".training_state", ".optimizer_shards")
        ]
        + ["best.safetensors"]  # (the lowest validation loss: gathered by every process, written by rank 0)
    )
    shards = sorted(os.listdir(checkpoints / f"{middle}.optimizer_shards"))
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # (rank 0's index, a file of each process's)
    whole, one = last_checkpoint(runs, "sharded"), last_checkpoint(runs, "one")
    assert {k: v.shape for k, v in whole.items()} == {k: v.shape for k, v in one.items()}  # (UNETLoader's layout)
    assert load_file(checkpoints / "best.safetensors").keys() == whole.keys()


def test_keep_last_drops_an_older_checkpoint_with_its_optimizer_s_shards(runs):
    kept = f"sharded_step{STEPS:06d}"  # (the resumed run wrote one at 3/4 of the steps too)
    assert [os.path.basename(path) for path in runs["resumed"]["checkpoints"]] == [f"{kept}.safetensors"]
    expected = sorted(f"{kept}{suffix}" for suffix in (".safetensors", ".training_state", ".optimizer_shards"))
    written = set(os.listdir(runs["folder"] / "resumed" / "checkpoints")) - {"best.safetensors"}
    assert sorted(written) == expected


def test_a_sharded_checkpoint_without_its_optimizer_s_shards_is_refused_before_the_run_starts(runs, tmp_path):
    middle = runs["sharded"]["checkpoints"][0]
    for suffix in (".safetensors", ".training_state"):  # (its shards folder left behind)
        shutil.copy(middle[: -len(".safetensors")] + suffix, tmp_path / ("middle" + suffix))
    point = load_resume_point(str(tmp_path / "middle.safetensors"))
    request = RunRequest(None, None, fine_tune(precision=FSDP), resume=point, processes=TrainingProcesses(0, 2))
    with pytest.raises(EriDiffusionError, match=r"middle\.optimizer_shards is missing: the optimizer's state of a"):
        preflight(request, SETTINGS_CHECKS)
    shutil.copytree(middle[: -len(".safetensors")] + ".optimizer_shards", tmp_path / "middle.optimizer_shards")
    preflight(request, SETTINGS_CHECKS)


def test_sharding_is_refused_with_adapters_one_process_and_the_settings_it_does_not_run_with():
    full = AdapterSpec(algorithm="full")

    def refusal(processes=2, samples=False, experts=False, **values):
        config = fine_tune(**{"precision": FSDP, "adapter": full, **values})
        with pytest.raises(EriDiffusionError) as refused:
            check_sharding(config, config.adapter.algorithm == "full", processes)
            check_sharded_inputs(config, samples, experts)
        return str(refused.value)

    assert "this run trains adapters (lora)" in refusal(adapter=AdapterSpec())
    assert "this run has one process: start it on 2 or more GPUs" in refusal(processes=1)
    assert "optimizer Adafactor, which would step each shard as a whole" in refusal(optimizer="Adafactor")
    assert "samples during training (rank 0 renders alone): set sample: null" in refusal(samples=True)
    assert "cuda_graphs on" in refusal(cuda_graphs="on")
    assert "fine_tune_dtype bf16" in refusal(precision=PrecisionSpec(sharding="fsdp", fine_tune_dtype="bf16"))
    assert "ema_decay" in refusal(ema_decay=0.9)
    assert "two experts" in refusal(experts=True)
    check_sharding(fine_tune(precision=FSDP, adapter=full), True, 2)  # (what the runs above train)
    check_sharded_inputs(fine_tune(precision=FSDP, adapter=full), False, False)
    check_sharding(fine_tune(adapter=AdapterSpec()), False, 1)  # (sharding none: nothing to refuse)
    check_sharded_inputs(fine_tune(adapter=AdapterSpec()), True, True)


def test_sharding_in_one_process_is_refused_by_the_preflight_s_settings_checks_before_any_model_loads():
    config = fine_tune(precision=FSDP)
    with pytest.raises(EriDiffusionError, match="sharding fsdp splits the trained weights over the processes"):
        preflight(RunRequest(None, None, config), SETTINGS_CHECKS)
    preflight(RunRequest(None, None, config, processes=TrainingProcesses(0, 2)), SETTINGS_CHECKS)
