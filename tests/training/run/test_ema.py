"""The EMA of the adapter weights: the analytic average of the trained weights, saved beside them,
both files loading in stock ComfyUI, and a resumed run continuing the average exactly."""

import dataclasses
import logging
import os

import comfy.sd
import comfy.utils
import pytest
import safetensors.torch
import torch

from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.run.build import TrainingRun
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.ema import AdapterEMA
from eridiffusion.training.run.resume import load_resume_point
from eridiffusion.training.run.trainer import TrainingHooks, train, train_lora


@pytest.fixture
def stack(quality_stack):
    model, _, _, data = quality_stack
    return model, dataclasses.replace(data, validation=None)


def ema_config(**values):
    settings = dict(
        steps=6,
        learning_rate=3e-3,
        dtype="fp32",
        gradient_checkpointing=False,
        log_every=3,
        ema_decay=0.8,
        ema_warmup=3,
        adapter=AdapterSpec(rank=4, alpha=4.0),
        run_name="ema",
    )
    return TrainConfig(**{**settings, **values})


def test_the_warmup_ramps_the_decay_linearly():
    ema = AdapterEMA([torch.nn.Parameter(torch.zeros(2))], 0.9, warmup=4)
    assert [ema.decay_at(n) for n in (1, 2, 4, 10)] == pytest.approx([0.225, 0.45, 0.9, 0.9])
    assert AdapterEMA([torch.nn.Parameter(torch.zeros(2))], 0.9).decay_at(1) == 0.9


def test_the_ema_after_n_steps_is_the_analytic_average_of_the_recorded_weights(stack, tmp_path, caplog):
    model, data = stack
    config = ema_config()
    run = TrainingRun(model, data, config, str(tmp_path))
    parameters = run.trained.parameters()
    recorded = [[p.detach().clone() for p in parameters]]
    try:
        with torch.inference_mode(False):
            result = train(
                run,
                None,
                TrainingHooks(on_progress=lambda *_: recorded.append([p.detach().clone() for p in parameters])),
            )
    finally:
        run.release()
    assert len(recorded) == 7
    expected = recorded[0]
    for step, weights in enumerate(recorded[1:], start=1):
        decay = config.ema_decay * min(1.0, step / config.ema_warmup)
        expected = [decay * e + (1 - decay) * w for e, w in zip(expected, weights)]
    # the run's adapters end as the average (its MODEL and LoRA), the trained weights beside
    assert max((p.detach() - e).abs().max().item() for p, e in zip(parameters, expected)) < 1e-6
    assert max((w - e).abs().max().item() for w, e in zip(recorded[-1], expected)) > 1e-4  # it does average
    final = os.path.join(tmp_path, "checkpoints", "ema_step000006.safetensors")
    averaged, trained = (
        safetensors.torch.load_file(final),
        safetensors.torch.load_file(final[:-12] + "_raw.safetensors"),
    )
    layer, adapter = next(iter(run.trained.adapters.items()))
    key = run.trained.prefixes[f"{layer}.weight"] + ".lora_up.weight"
    index = next(i for i, p in enumerate(parameters) if p is adapter.lycoris.lora_up.weight)
    assert torch.allclose(trained[key].reshape(recorded[-1][index].shape), recorded[-1][index], atol=1e-7)
    assert torch.allclose(averaged[key].reshape(expected[index].shape), expected[index], atol=1e-6)
    assert result.lora.tensors.keys() == averaged.keys()
    for path in (final, final[:-12] + "_raw.safetensors"):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            comfy.sd.load_lora_for_models(model, None, comfy.utils.load_torch_file(path), 1.0, 0)
        assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]


def test_a_resumed_run_continues_the_ema_exactly(stack, tmp_path):
    model, data = stack
    with torch.inference_mode(False):
        whole = train_lora(model, data, ema_config(save_every=3), str(tmp_path / "whole"))
        middle = load_resume_point(str(tmp_path / "whole" / "checkpoints" / "ema_step000003.safetensors"))
        resumed = train_lora(model, data, ema_config(save_every=3), str(tmp_path / "resumed"), resume=middle)
    for lora in (whole.lora, whole.lora.raw):
        other = resumed.lora if lora is whole.lora else resumed.lora.raw
        assert max((lora.tensors[k] - other.tensors[k]).abs().max().item() for k in lora.tensors) < 1e-6
