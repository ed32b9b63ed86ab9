"""Regression guards for the fast path of a training step: nothing is read back from the device
except on logging steps, and bypass adapters never build a full-size ΔW."""

import collections

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.run.build import TrainingRun
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.preflight import preflight
from eridiffusion.training.run.request import RunRequest
from eridiffusion.training.run.trainer import TrainingHooks, train

# Tensor → Python conversions: on a GPU each one waits for the device to catch up.
READ_BACKS = {
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.cpu,
    torch.Tensor.numpy,
    torch.Tensor.__bool__,
    torch.Tensor.__float__,
    torch.Tensor.__int__,
    torch.Tensor.__index__,
}


class ReadBackCounter(TorchFunctionMode):
    """Counts read-backs per training step (the step in progress when they happen)."""

    def __init__(self):
        super().__init__()
        self.step, self.counts = 1, collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in READ_BACKS:
            self.counts[self.step] += 1
        return func(*args, **(kwargs or {}))


def _run(lora_stack, tmp_path, config, watch):
    """Train `config` on the tiny model's data with `watch` (a torch mode) active over the steps only."""
    run = TrainingRun(lora_stack["model"], lora_stack["data"], config, str(tmp_path))
    try:
        run.progress.eval_before = 0.0  # skip the evaluation pass: it is not part of the steps
        steps = []

        def on_progress(step, total, losses, stats):
            steps.append(step)
            watch.step = step + 1

        with torch.inference_mode(False), watch:
            train(run, None, TrainingHooks(on_progress=on_progress))
    finally:
        run.release()
    return steps


def sync_config(**values):
    """8 fp32 steps logging every 4th: the run the read-back tests count in."""
    settings = dict(
        gradient_checkpointing=False,
        steps=8,
        learning_rate=1e-3,
        dtype="fp32",
        log_every=4,
        adapter=AdapterSpec(rank=4, alpha=4.0, targets="all-linear"),
    )
    return TrainConfig(**{**settings, **values})


# on_nan=skip leaves a bad step out on the device (AdamW is fused): no read-back either.
@pytest.mark.parametrize("on_nan", ["stop", "skip"])
def test_a_step_reads_nothing_back_from_the_device_except_on_logging_steps(on_nan, lora_stack, tmp_path):
    config = sync_config(run_name="sync", on_nan=on_nan)
    counter = ReadBackCounter()
    _run(lora_stack, tmp_path, config, counter)
    in_steps = {step: n for step, n in counter.counts.items() if step <= config.steps}
    # one read-back per logging step (the loss buffer), none anywhere else
    assert in_steps == {4: 1, 8: 1}


def test_validation_and_ema_read_back_only_on_validation_steps(lora_stack, tmp_path):
    import dataclasses

    from eridiffusion.training.data.training_data import TrainingData

    data = lora_stack["data"]
    held_out = TrainingData(data.samples[:1], data.empty_conditioning, 0.0, 1, data.resolution, "")
    config = sync_config(run_name="sync_validation", validate_every=3, ema_decay=0.9)
    counter = ReadBackCounter()
    _run({**lora_stack, "data": dataclasses.replace(data, validation=held_out)}, tmp_path, config, counter)
    validation_steps = {3, 6, 8}  # (and the best checkpoint's export there)
    in_steps = {step: n for step, n in counter.counts.items() if step <= config.steps and step not in validation_steps}
    assert in_steps == {4: 1}
    assert all(counter.counts[step] >= 2 for step in validation_steps)


class NewTensorShapes(TorchDispatchMode):
    """Records the shape of every new (non-view) tensor any aten op makes, forward and backward."""

    def __init__(self):
        super().__init__()
        self.shapes = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    self.shapes.add(tuple(t.shape))
        return out


# Sizes no activation of the probe shares: a weight-shaped tensor can only be a ΔW.
PROBE_LAYERS = {"linear": (torch.nn.Linear(37, 53), (2, 5, 37)), "conv": (torch.nn.Conv2d(11, 13, 3), (2, 11, 9, 9))}


@pytest.mark.parametrize("kind", sorted(PROBE_LAYERS))
# LoHa is left out: its ΔW = (w1a·w1b) ⊙ (w2a·w2b) is a Hadamard product, which has no low-rank
# bypass form; LyCORIS builds it per layer (weight-sized, but only that layer's, never W + ΔW).
@pytest.mark.parametrize("algorithm", ["lora", "dora", "lokr"])
def test_bypass_adapters_never_build_a_full_size_delta_weight(algorithm, kind):
    layer, input_shape = PROBE_LAYERS[kind]
    layer.requires_grad_(False)
    adapter = AdapterSpec(algorithm=algorithm, rank=4, alpha=4.0, conv_rank=4, conv_alpha=4.0).build(layer, seed=0)
    x = torch.randn(input_shape, requires_grad=True)
    adapter(x, layer)  # a first call may set up caches of the frozen weight (DoRA's ‖W‖²)
    watch = NewTensorShapes()
    with watch:
        adapter(x, layer).square().sum().backward()
    weight = tuple(layer.weight.shape)
    assert weight not in watch.shapes and weight[:2][::-1] + weight[2:] not in watch.shapes
    assert all(p.grad is not None for p in adapter.parameters() if p.requires_grad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine the model trains on CUDA")
def test_cuda_graphs_on_a_cpu_is_refused_with_the_fix(lora_stack):
    from eridiffusion.errors import EriDiffusionError

    config = TrainConfig(
        gradient_checkpointing=False,
        steps=1,
        dtype="fp32",
        cuda_graphs="on",
        run_name="graphs",
        adapter=AdapterSpec(rank=2, alpha=2.0, targets="attention"),
    )
    with pytest.raises(EriDiffusionError, match="cuda_graphs needs a CUDA device"):  # before anything is built
        preflight(RunRequest(lora_stack["model"], lora_stack["data"], config))
