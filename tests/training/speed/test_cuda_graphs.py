"""CUDA graphs when a capture fails (the driver, cuBLAS or an op refusing capture): with cuda_graphs
auto the run goes on without graphs, with one warning, and trains what an eager run trains; with
cuda_graphs on it stops with the fix (the failure is a host sync inside the capture, which CUDA
refuses). And with the text encoder trained: the graphs replay with its live encoding as an input
whose gradient flows back into it, are captured again when the model's weights move, and train
what an eager run trains. In bf16 they compute with the step's bf16 copies of the adapter weights.
Needs a CUDA device (run on the GPU machine: see bench/gpu_host.sh)."""

import dataclasses
import logging

import pytest
import torch

from devkit.short_runs import encoding_changes
from devkit.short_runs import short_run as config
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.run.trainer import train_lora
from eridiffusion.training.speed import cuda_graphs, step_path
from eridiffusion.training.speed.compute_copies import ComputeCopies
from eridiffusion.training.speed.paths import SpeedPaths

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")

NO_COPIES = SpeedPaths(compute_copies=False)  # each layer casts its fp32 LoRA weights itself


class SyncInCapture(cuda_graphs.GraphedCall):
    """GraphedCall whose loss reads a value back to the host while a capture is running."""

    def __init__(self, loss_fn, *args, **kwargs):
        def syncing(batch):
            loss = loss_fn(batch)
            if torch.cuda.is_current_stream_capturing():
                float(loss.detach())  # a device-to-host copy: not allowed during capture
            return loss

        super().__init__(syncing, *args, **kwargs)


@pytest.fixture
def stack(quality_stack):
    model, _, _, data = quality_stack
    return model, dataclasses.replace(data, validation=None)


def test_a_failed_capture_under_auto_trains_on_without_graphs_as_an_eager_run(stack, tmp_path, monkeypatch, caplog):
    model, data = stack
    with torch.inference_mode(False):
        eager = train_lora(model, data, config("off", "eager"), str(tmp_path / "eager"))
        monkeypatch.setattr(step_path, "GraphedCall", SyncInCapture)
        with caplog.at_level(logging.WARNING):
            fallen_back = train_lora(model, data, config("auto", "fallback"), str(tmp_path / "fallback"))
    warnings = [r.getMessage() for r in caplog.records if "CUDA graph failed" in r.getMessage()]
    assert len(warnings) == 1 and "continues without CUDA graphs" in warnings[0], warnings
    # the same steps as the eager run, to the GPU's run-to-run noise (measured: 1.3e-4 at most)
    assert fallen_back.losses == pytest.approx(eager.losses, rel=1e-3)


def test_a_failed_capture_under_on_stops_naming_the_fix(stack, tmp_path, monkeypatch):
    model, data = stack
    monkeypatch.setattr(step_path, "GraphedCall", SyncInCapture)
    with torch.inference_mode(False), pytest.raises(EriDiffusionError, match="Set cuda_graphs to auto"):
        train_lora(model, data, config("on", "strict"), str(tmp_path / "strict"))


class Recorded(cuda_graphs.GraphedCall):
    """GraphedCall that keeps its instances and counts the micro-batches it replayed; with
    `move_weights`, before that many calls with graphs captured it moves the model's weights (as
    ComfyUI does when it offloads the model to load another), which the graphs must notice."""

    instances = []
    move_weights = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.replayed, self.moves_left = 0, self.move_weights
        Recorded.instances.append(self)

    def __call__(self, batch):
        if self.moves_left and self.graphs:
            self.moves_left -= 1
            with torch.no_grad():
                for parameter in self.frozen.parameters():
                    parameter.data = parameter.data.clone()
        loss = super().__call__(batch)
        self.replayed += loss is not None
        return loss


@pytest.mark.parametrize("moves", [0, 2])
def test_text_encoder_training_replays_graphs_and_trains_what_an_eager_run_trains(
    quality_stack, tmp_path, monkeypatch, moves
):
    model, clip, _, data = quality_stack
    data = dataclasses.replace(data, validation=None)
    runs = {}
    monkeypatch.setattr(step_path, "GraphedCall", Recorded)
    monkeypatch.setattr(Recorded, "instances", [])
    monkeypatch.setattr(Recorded, "move_weights", moves)
    with torch.inference_mode(False):
        for setting in ("off", "on"):
            runs[setting] = train_lora(
                model, data, config(setting, setting, text_encoder_lr=3e-3), str(tmp_path / setting), clip=clip
            )
    (graphed,) = Recorded.instances
    # (a move can make ComfyUI's next load move them once more: each is noticed)
    assert graphed.replayed == 4 and moves <= graphed.recaptures <= graphed.MAX_RECAPTURES
    assert runs["on"].losses == pytest.approx(runs["off"].losses, rel=1e-3)
    # the text encoder trained alike: its gradient came out of the replayed backward
    change, apart = encoding_changes(clip, runs["off"], runs["on"])
    assert change > 1e-2
    # to the GPU's run-to-run noise, which Adam amplifies (it scales tiny gradients up to the full
    # step): measured 0.8% of the change after 4 steps
    assert apart <= 0.03 * change


def test_weights_that_keep_moving_end_the_graphs_with_one_warning(quality_stack, tmp_path, monkeypatch, caplog):
    model, clip, _, data = quality_stack
    data = dataclasses.replace(data, validation=None)
    monkeypatch.setattr(step_path, "GraphedCall", Recorded)
    monkeypatch.setattr(Recorded, "instances", [])
    monkeypatch.setattr(Recorded, "move_weights", 100)
    with torch.inference_mode(False), caplog.at_level(logging.WARNING):
        result = train_lora(
            model, data, config("auto", "moving", steps=8, text_encoder_lr=3e-3), str(tmp_path / "moving"), clip=clip
        )
    (graphed,) = Recorded.instances
    warnings = [r.getMessage() for r in caplog.records if "weights moved" in r.getMessage()]
    assert len(warnings) == 1 and "continues without CUDA graphs" in warnings[0], warnings
    assert graphed.replayed == cuda_graphs.GraphedCall.MAX_RECAPTURES + 1 and len(result.losses) == 8


def test_a_bf16_run_replays_graphs_that_compute_with_the_steps_copies_and_trains_as_per_layer_casts(
    stack, tmp_path, monkeypatch
):
    """In bf16 the graphs take the step's bf16 copies of the adapter weights as trained inputs (no cast
    kernels per layer in them); the copies' gradients come out of the replayed backward and reach the
    fp32 masters, which train as the per-layer casts train them."""
    model, data = stack
    monkeypatch.setattr(step_path, "GraphedCall", Recorded)
    monkeypatch.setattr(Recorded, "instances", [])
    folds = []
    fold = ComputeCopies.fold_gradients
    monkeypatch.setattr(ComputeCopies, "fold_gradients", lambda self: folds.append(1) or fold(self))
    bf16 = config("on", "copies", dtype="bf16", learning_rate=1e-3)
    with torch.inference_mode(False):
        with_copies = train_lora(model, data, bf16, str(tmp_path / "copies"))
    (graphed,) = Recorded.instances
    assert graphed.replayed == 4 and len(folds) == 4
    graph_inputs = {id(p) for p in graphed.trained.parameters()}
    copies = [m for m in graphed.trained.modules() if isinstance(m, torch.nn.ParameterList)]
    assert len(copies) == 1 and all(p.dtype == torch.bfloat16 and id(p) in graph_inputs for p in copies[0])
    with torch.inference_mode(False):
        per_layer = train_lora(
            model, data, dataclasses.replace(bf16, run_name="casts", speed=NO_COPIES), str(tmp_path / "casts")
        )
    assert len(Recorded.instances) == 2 and len(folds) == 4
    assert with_copies.losses == pytest.approx(per_layer.losses, rel=1e-3)
    a, b = with_copies.trained.adapters.state_dict(), per_layer.trained.adapters.state_dict()
    ups = [name for name in a if "lora_up" in name]
    assert ups and all(a[name].abs().max() > 0 for name in ups)  # trained (they start at zero)
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-2, atol=1e-5)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gradients_accumulated_over_replays_are_the_sum_an_eager_run_accumulates(stack, dtype, tmp_path):
    """grad_accum 2: each micro-batch's backward replays the same graph, whose gradients land in one
    static buffer per tensor. A tensor's first gradient of a step may be taken by autograd as its .grad
    without a copy (AccumulateGrad keeps a gradient no one else holds), and the next replay would then
    write over it: the step would train on twice the last micro-batch's gradient instead of the sum.
    (A fused-backward GPU run, 2026-11-30, saw an unfused graphed Adafactor run with grad_accum 2 0.23%
    from the eager one after its first update; this compares graphs with eager directly.)"""
    model, data = stack
    values = dict(grad_accum=2, dtype=dtype, learning_rate=1e-3, steps=3)
    with torch.inference_mode(False):
        eager = train_lora(model, data, config("off", f"accum_eager_{dtype}", **values), str(tmp_path / "eager"))
        graphed = train_lora(model, data, config("on", f"accum_graphs_{dtype}", **values), str(tmp_path / "graphs"))
    assert graphed.losses == pytest.approx(eager.losses, rel=1e-3)  # (the GPU's run-to-run noise)
    # AdamW moves an element by about the learning rate (1e-3) a step whatever its gradient's size, so the
    # GPU's noise in a near-zero gradient moves single elements by up to two steps and the mean by little
    # (2026-11-30, H200, graphs against eager: fp32 mean 9.2e-6, bf16 2.5e-5); without the gradients
    # copied out between replays the fp32 run's mean was 1.2e-3 (the check was run with the copy removed)
    a, b = graphed.trained.adapters.state_dict(), eager.trained.adapters.state_dict()
    for name in a:
        moved = (a[name].float() - b[name].float()).abs()
        assert moved.mean() <= 2.5e-4, (name, moved.max(), moved.mean())
