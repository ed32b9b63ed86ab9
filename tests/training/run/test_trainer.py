"""Training tiny ComfyUI SD1.5 and SDXL models on real photos: learning, the saved file in stock
ComfyUI, and the input model left alone."""

import contextlib
import dataclasses
import json
import logging
import os

import comfy.model_management
import comfy.sd
import comfy.utils
import pytest
import safetensors
import torch

from devkit.stock_comfyui import load_with_stock_comfyui, merged_tolerance, merging_in_fp32, relative_error
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.adapters.oft import STOCK_MERGE_NOTE
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.evaluation import evaluation_loss
from eridiffusion.training.run.trainer import TrainingHooks, train_lora


def test_evaluation_loss_drops_at_least_30_percent(trained, record_property):
    # (each algorithm's first case; the others, and every case on CI's second host, train a quarter of
    # the run, the loss falling: conftest._train_tiny)
    result = trained["result"]
    record_property("eval_loss_share", result.eval_loss_after / result.eval_loss_before)  # (the margin, in JUnit)
    assert result.eval_loss_after < trained["bar"] * result.eval_loss_before, (
        result.eval_loss_before,
        result.eval_loss_after,
    )


def test_the_loss_before_training_measured_at_the_end_is_the_input_models(trained):
    """The evaluation loss "before" (measured at the run's end with the trained change bypassed, so the
    first step comes sooner) is the input MODEL's own, for every algorithm."""
    with torch.inference_mode(False):
        before = evaluation_loss(trained["model"], trained["data"], trained["config"])
    assert trained["result"].eval_loss_before == pytest.approx(before, rel=1e-5)


def test_training_loss_is_recorded_for_every_step(trained):
    result = trained["result"]
    assert len(result.losses) == trained["config"].steps
    assert all(torch.isfinite(torch.tensor(result.losses)))


def test_saved_file_loads_in_stock_comfyui_with_no_unmatched_key(trained, tmp_path, caplog):
    path = trained["result"].lora.save(str(tmp_path / "lora.safetensors"), dtype="fp32")
    _, unmatched = load_with_stock_comfyui(trained["model"], path, 1.0, caplog)
    assert unmatched == []
    with safetensors.safe_open(path, "pt") as f:
        keys = list(f.keys())
        metadata = f.metadata()
    layers = {k.rsplit(".", 2)[0] if k.endswith(".weight") else k.rsplit(".", 1)[0] for k in keys}
    assert len(layers) > 50
    assert metadata["architecture"] == type(trained["model"].model.model_config).__name__
    assert metadata["steps"] == str(trained["config"].steps) and metadata["eridiffusion_rank"] == "8"
    assert metadata["eridiffusion_adapter"] == trained["config"].adapter.algorithm
    assert metadata["dataset_hash"] == trained["data"].dataset_fingerprint


@pytest.mark.parametrize("strength", [1.0, 0.5])
def test_stock_comfyui_patched_output_equals_trainer_model_output(trained, strength, tmp_path, caplog):
    path = trained["result"].lora.save(str(tmp_path / "lora.safetensors"), dtype="fp32")
    boft = trained["config"].adapter.algorithm == "boft" and strength != 1.0
    patched, _ = load_with_stock_comfyui(trained["model"], path, strength, caplog)
    probe = trained["probe"]
    trained["result"].trained.adapters.set_multiplier(strength)  # LoraLoader's strength on the trainer's MODEL
    try:
        trainer_output = probe.output(trained["result"].patcher)
    finally:
        trained["result"].trained.adapters.set_multiplier(1.0)
    dora = trained["config"].adapter.algorithm == "dora"
    # (stock ComfyUI 0.28 merges BOFT at strengths other than 1 in fp32 alone: in its GPU's fp16 merge its
    # boft.py mixes dtypes there and skips the layer, as the run's warning says, adapters/oft.STOCK_MERGE_NOTE)
    with merging_in_fp32(patched.load_device) if boft else contextlib.nullcontext():
        patched_output = probe.output(patched)
    assert relative_error(patched_output, trainer_output) < merged_tolerance(patched, on_a_gpu=1e-2 if dora else 3e-3)
    # and the LoRA does something: the trained model differs from the base
    assert relative_error(trainer_output, trained["base_output_before"]) > 1e-2


def test_strength_zero_equals_the_base_model(trained, tmp_path, caplog):
    path = trained["result"].lora.save(str(tmp_path / "lora.safetensors"), dtype="fp32")
    patched, _ = load_with_stock_comfyui(trained["model"], path, 0.0, caplog)
    error = relative_error(trained["probe"].output(patched), trained["base_output_before"])
    assert error < merged_tolerance(patched, on_the_cpu=1e-6)


def test_input_model_output_is_bit_identical_after_training(trained):
    # the trained MODEL was used in the tests above; the input MODEL must not have changed
    probe = trained["probe"]
    probe.output(trained["result"].patcher)
    assert torch.equal(probe.output(trained["model"]), trained["base_output_before"])


def test_cancel_stops_at_a_step_boundary_and_keeps_the_last_checkpoint(lora_stack, tmp_path, caplog):
    stack = lora_stack
    model = stack["model"]
    config = TrainConfig(
        gradient_checkpointing=False,
        steps=50,
        learning_rate=1e-3,
        dtype="fp32",
        save_every=2,
        log_every=1,
        adapter=AdapterSpec(rank=4, alpha=4.0),
        run_name="cancelled",
    )
    seen = []

    def on_progress(step, total, losses, stats):
        seen.append(step)
        if step == 5:
            comfy.model_management.interrupt_current_processing(True)  # what ComfyUI's Cancel does

    hooks = TrainingHooks(
        on_progress=on_progress, check_cancel=comfy.model_management.throw_exception_if_processing_interrupted
    )
    try:
        with torch.inference_mode(False), pytest.raises(comfy.model_management.InterruptProcessingException):
            train_lora(model, stack["data"], config, str(tmp_path), hooks=hooks)
    finally:
        comfy.model_management.interrupt_current_processing(False)
    assert seen == [1, 2, 3, 4, 5]
    checkpoints = sorted(f for f in os.listdir(tmp_path / "checkpoints") if f.endswith(".safetensors"))
    assert checkpoints == ["cancelled_step000002.safetensors", "cancelled_step000004.safetensors"]
    assert os.path.exists(tmp_path / "checkpoints" / "cancelled_step000004.training_state")
    _, unmatched = load_with_stock_comfyui(model, str(tmp_path / "checkpoints" / checkpoints[-1]), 1.0, caplog)
    assert unmatched == []
    # the cancelled run's clone is gone: the input model computes exactly what it did before
    assert torch.equal(stack["probe"].output(model), stack["base_output_before"])


@pytest.mark.parametrize("lora_stack", ["sd15"], indirect=True)
def test_a_boft_run_says_where_stock_comfyui_applies_its_file(lora_stack, tmp_path, caplog):
    """Stock ComfyUI 0.28 merges a BOFT file at a strength other than 1 in fp32 alone (on a GPU, in fp16,
    its boft.py fails there and leaves the layers unpatched: the GPU suite's trainer run, 2026-11-29, and
    the CPU with its merges set to fp16): the run says so."""
    config = TrainConfig(steps=1, learning_rate=1e-3, dtype="fp32", log_every=1, run_name="boft")
    config = dataclasses.replace(config, adapter=AdapterSpec(algorithm="boft", rank=8), eval_images=1, eval_timesteps=1)
    with caplog.at_level(logging.WARNING), torch.inference_mode(False):
        train_lora(lora_stack["model"], lora_stack["data"], config, str(tmp_path))
    assert STOCK_MERGE_NOTE in [r.getMessage() for r in caplog.records]


def test_a_bf16_run_computes_in_the_models_own_dtype_without_autocast(lora_stack, tmp_path):
    """The frozen model runs in the run's compute dtype as ComfyUI's sampler runs it (its layers cast
    their weights), not under autocast, which would up-cast every norm and softmax to fp32 and back;
    the adapters keep fp32 weights and gradients."""
    seen = []

    def watch(module, args, output):
        seen.append((output.dtype, torch.is_autocast_enabled("cpu")))

    block = lora_stack["model"].model.diffusion_model.input_blocks[1][0]  # a resnet block
    hook = block.register_forward_hook(watch)
    try:
        config = TrainConfig(
            steps=2, learning_rate=1e-3, dtype="bf16", gradient_checkpointing=False, log_every=2, run_name="bf16"
        )
        config = dataclasses.replace(config, eval_images=1, eval_timesteps=1)  # (bf16 on a CPU: slow to evaluate)
        with torch.inference_mode(False):
            result = train_lora(lora_stack["model"], lora_stack["data"], config, str(tmp_path))
    finally:
        hook.remove()
    assert seen and set(seen) == {(torch.bfloat16, False)}
    assert all(torch.isfinite(torch.tensor(loss)) for loss in result.losses)
    assert {p.dtype for p in result.trained.adapters.parameters()} == {torch.float32}


def test_the_summary_times_the_setup_and_the_first_step_apart_from_the_steps(trained_lora):
    """summary.json says how long the run took to reach its first step (building, the evaluation
    loss, the data on the device) and how long that step took (a CUDA graph capture or a compile
    happens there), beside the seconds per step of the rest."""
    with open(os.path.join(trained_lora["result"].run_dir, "summary.json")) as f:
        summary = json.load(f)
    setup, first, pace = summary["setup_seconds"], summary["first_step_seconds"], summary["seconds_per_step"]
    assert setup > 0 and first > 0 and pace > 0
    # the setup's phases, in the order they run, add up to (nearly all of) it
    phases = summary["setup_phases"]
    assert list(phases) == [
        "clone",
        "weights_cast",
        "trained_built",
        "optimizer",
        "evaluation_before",
        "weights_loaded",
        "data_prepared",
        "step_path",
    ]
    assert 0.9 * setup <= sum(phases.values()) <= setup
    # the pace is timed from the first logging step (20) to the last: the setup, the first step and the
    # steps timed are parts of the run's wall time ((steps - 1) x pace takes the 19 steps between for as
    # slow as the rest, and a busy second test worker made it 0.6% more than the wall time)
    timed = trained_lora["config"].steps - trained_lora["config"].log_every
    assert setup + first + timed * pace <= trained_lora["wall_seconds"]
    assert setup + first + (trained_lora["config"].steps - 1) * pace <= 1.1 * trained_lora["wall_seconds"]
