"""LoRATrainer's features as users reach them: through ComfyUI's executor, which runs every node
under torch.inference_mode (resuming through it is in tests/reliability/test_resume_and_state_files.py)."""

import json
import os
import shutil

import pytest
import safetensors.torch
import torch

from devkit.workflow import load_extension, run_training
from eridiffusion.training.run.optimizers import OPTIMIZERS

CPU_REFUSES = {"PagedAdamW": "AdamW", "PagedAdamW8bit": "AdamW8bit (the same without paging) or AdamW"}


@pytest.fixture(scope="module")
def registered():
    return load_extension()


@pytest.fixture(scope="module")
def two_photos(datasets_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("trainer_node_photos")
    for name in ("00", "01"):
        for ext in (".jpg", ".txt"):
            shutil.copy(os.path.join(datasets_dir, "dreambooth_dog", name + ext), folder)
    return folder


def summary(outcome):
    with open(os.path.join(outcome.run_dir, "summary.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_every_optimizer_trains_through_the_executor_or_is_refused_with_an_alternative(
    optimizer, registered, two_photos
):
    import torch

    outcome = run_training(two_photos, f"optimizer_{optimizer}", trainer={"optimizer": optimizer})
    if optimizer in CPU_REFUSES and not torch.cuda.is_available():
        assert outcome.error.startswith(f"EriDiffusion_LoRATrainer: optimizer {optimizer} cannot run on cpu: ")
        assert outcome.error.endswith(f" Choose another optimizer, e.g. {CPU_REFUSES[optimizer]}.")
        return
    assert outcome.success, outcome.error
    assert len(outcome.losses()) == 2 and summary(outcome)["config"]["optimizer"] == optimizer


@pytest.mark.parametrize("algorithm", ["oft", "boft", "glora"])
def test_the_rotation_and_glora_adapters_train_through_the_executor_and_load_in_stock_loraloader(
    algorithm, registered, two_photos, comfy_dirs, caplog
):
    import logging

    import nodes

    from devkit.tiny_models import build_tiny

    outcome = run_training(
        two_photos,
        f"algorithm_{algorithm}",
        trainer={"steps": 3, "algorithm": algorithm, "targets": "all-linear"},
        save={"filename_prefix": f"algorithm/{algorithm}"},
    )
    assert outcome.success, outcome.error
    path = os.path.join(comfy_dirs["loras"], "algorithm", f"{algorithm}.safetensors")
    with safetensors.safe_open(path, "pt") as f:
        assert json.loads(f.metadata()["eridiffusion_adapter_spec"])["algorithm"] == algorithm
        expected = "oft_blocks" if algorithm != "glora" else "a1.weight"
        assert any(k.endswith(f".{expected}") for k in f.keys())
    model, clip, _ = build_tiny("sd15", seed=0)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        nodes.LoraLoader().load_lora(model, clip, f"algorithm/{algorithm}.safetensors", 1.0, 0.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]


def test_norms_and_biases_train_through_the_executor_and_load_in_stock_loraloader(
    registered, two_photos, comfy_dirs, caplog
):
    import logging

    import nodes

    from devkit.tiny_models import build_tiny

    outcome = run_training(
        two_photos,
        "norms_and_biases",
        trainer={"steps": 3, "train_norms_and_biases": True, "targets": "all-linear"},
        save={"filename_prefix": "algorithm/norms"},
    )
    assert outcome.success, outcome.error
    path = os.path.join(comfy_dirs["loras"], "algorithm", "norms.safetensors")
    keys = safetensors.torch.load_file(path).keys()
    assert any(k.endswith(".diff") for k in keys) and any(k.endswith(".diff_b") for k in keys)
    model, clip, _ = build_tiny("sd15", seed=0)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        patched, _ = nodes.LoraLoader().load_lora(model, clip, "algorithm/norms.safetensors", 1.0, 0.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]
    assert any(key.endswith(".bias") for key in patched.patches)


def test_save_every_and_keep_last_leave_the_newest_checkpoints_with_their_state(registered, two_photos):
    outcome = run_training(two_photos, "kept", trainer={"steps": 6, "save_every": 2, "keep_last": 2})
    assert outcome.success, outcome.error
    assert outcome.checkpoints() == [
        "kept_step000004.safetensors",
        "kept_step000004.training_state",
        "kept_step000006.safetensors",
        "kept_step000006.training_state",
    ]


def test_a_lora_file_from_another_trainer_continues_from_its_weights(registered, two_photos, comfy_dirs):
    first = run_training(
        two_photos,
        "plain_first",
        trainer={"steps": 4, "targets": "all-linear"},
        save={"filename_prefix": "plain/first", "dtype": "fp32"},
    )
    assert first.success, first.error
    path = os.path.join(comfy_dirs["loras"], "plain", "first.safetensors")
    foreign = os.path.join(comfy_dirs["loras"], "plain", "foreign.safetensors")
    safetensors.torch.save_file({k: v.clone() for k, v in safetensors.torch.load_file(path).items()}, foreign)
    continued = run_training(
        two_photos, "plain_continued", trainer={"steps": 2, "targets": "all-linear"}, resume="plain/foreign.safetensors"
    )  # relative: found in models/loras
    assert continued.success, continued.error
    assert summary(continued)["eval_loss_before"] == pytest.approx(summary(first)["eval_loss_after"], rel=1e-5)
    assert len(continued.losses()) == 2  # a new run: its own steps only


def test_text_encoder_training_through_the_executor_saves_text_encoder_keys(registered, two_photos, comfy_dirs):
    outcome = run_training(
        two_photos,
        "text_encoder",
        trainer={"text_encoder_lr": 1e-3},
        train_text_encoder=True,
        save={"filename_prefix": "text_encoder"},
    )
    assert outcome.success, outcome.error
    keys = safetensors.torch.load_file(os.path.join(comfy_dirs["loras"], "text_encoder.safetensors")).keys()
    assert any(k.startswith("lora_te_") for k in keys) and any(k.startswith("lora_unet_") for k in keys)


def test_an_eager_bf16_run_through_the_executor_computes_with_the_steps_bf16_copies(
    registered, two_photos, monkeypatch
):
    """Without CUDA graphs a bf16 run casts the adapters' fp32 weights once per step
    (adapters/compute_copies.py), and from the second step on computes the attention layers that
    share an input together (adapters/shared_input.py); under the executor's inference mode the
    copies still train."""
    import math
    import sys

    folds = []

    def counted(fold):
        def fold_counted(self):
            groups = None if self.groups is None else (len(self.groups), sum(g.missed for g in self.groups))
            folds.append((len(self.copies), groups))
            return fold(self)

        return fold_counted

    # the extension ComfyUI loaded is its own import of the package (under the checkout's folder name)
    for name, module in list(sys.modules.items()):
        if name.endswith("eridiffusion.training.speed.compute_copies"):
            monkeypatch.setattr(module.ComputeCopies, "fold_gradients", counted(module.ComputeCopies.fold_gradients))
    outcome = run_training(two_photos, "bf16_copies", trainer={"dtype": "bf16", "cuda_graphs": "off"})
    assert outcome.success, outcome.error
    losses = outcome.losses()
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)
    assert len(folds) == 2 and folds[0][0] > 0  # one backward pass a step, each through the copies
    # the tiny SDXL's 11 transformer blocks (4 down, 1 middle, 6 up), each with 2 groups (self-attention's
    # q, k, v; cross-attention's k, v), none of them missed
    assert folds[0][1] is None and folds[1][1] == (22, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_a_bf16_run_with_cuda_graphs_through_the_executor_replays_them_with_the_steps_bf16_copies(
    registered, two_photos, monkeypatch
):
    """With CUDA graphs a bf16 run's graphs compute with the step's bf16 copies too (no groups there):
    captured under the executor's inference mode, their gradients reach the fp32 masters."""
    import math
    import sys

    folds, replays = [], []
    for name, module in list(sys.modules.items()):
        if name.endswith("eridiffusion.training.speed.compute_copies"):
            fold = module.ComputeCopies.fold_gradients
            monkeypatch.setattr(
                module.ComputeCopies, "fold_gradients", lambda self, fold=fold: folds.append(self.groups) or fold(self)
            )
        if name.endswith("eridiffusion.training.speed.cuda_graphs"):
            call = module.GraphedCall.__call__
            monkeypatch.setattr(
                module.GraphedCall, "__call__", lambda self, batch, call=call: replays.append(1) or call(self, batch)
            )
    outcome = run_training(two_photos, "bf16_graphs", trainer={"dtype": "bf16", "cuda_graphs": "on"})
    assert outcome.success, outcome.error
    losses = outcome.losses()
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)
    assert len(replays) == 2 and folds == [[], []]  # each step's backward through the copies, ungrouped
