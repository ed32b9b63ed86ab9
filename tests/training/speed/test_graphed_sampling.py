"""Samples rendered during a run whose steps replay from CUDA graphs replay the sampler's model
calls from graphs of their own (training/speed/graphed_sampling.py): the same images as an eager
run's, one capture per input layout, and the training graphs are not captured again after them.
Needs a CUDA device (run on the GPU machine: see bench/gpu_host.sh)."""

import dataclasses

import pytest
import torch

from devkit.short_runs import short_run as config
from eridiffusion.training.run.trainer import train_lora
from eridiffusion.training.samples.render import SampleSettings, render_samples
from eridiffusion.training.speed import cuda_graphs, graphed_sampling, step_path

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


class CountedCaptures(cuda_graphs.GraphedCall):
    """GraphedCall that counts the training graphs it captured."""

    instances = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.captured = 0
        CountedCaptures.instances.append(self)

    def _captured(self, module, sample):
        self.captured += 1
        return super()._captured(module, sample)


class KeptSamplingGraphs(graphed_sampling.SamplingGraphs):
    instances = []

    def __init__(self):
        super().__init__()
        KeptSamplingGraphs.instances.append(self)


def test_samples_replay_the_samplers_calls_from_graphs_and_draw_what_eager_sampling_draws(
    quality_stack, tmp_path, monkeypatch
):
    model, clip, vae, data = quality_stack
    data = dataclasses.replace(data, validation=None)
    with torch.inference_mode():
        encode = lambda text: clip.encode_from_tokens_scheduled(clip.tokenize(text))
        prompts = ("a photo of a dog", "a dog on the beach")
        samples = SampleSettings(
            prompts, tuple(encode(p) for p in prompts), encode(""), vae, 2, 0, 4, 5.0, "euler", "normal", 64, 64
        )
    monkeypatch.setattr(step_path, "GraphedCall", CountedCaptures)
    monkeypatch.setattr(CountedCaptures, "instances", [])
    monkeypatch.setattr(graphed_sampling, "SamplingGraphs", KeptSamplingGraphs)
    monkeypatch.setattr(KeptSamplingGraphs, "instances", [])
    runs = {}
    with torch.inference_mode(False):
        for setting in ("off", "on"):
            runs[setting] = train_lora(
                model, data, config(setting, setting, steps=4), str(tmp_path / setting), sample_settings=samples
            )
    # samples at steps 2 and 4: each render captured once (both prompts' calls share a layout: the
    # prompt and the empty negative, batched) and replayed its 2 prompts x 4 steps from it
    assert [(g.failed, dict(g.eager)) for g in KeptSamplingGraphs.instances] == [(None, {}), (None, {})]
    assert [(g.captures, g.replays) for g in KeptSamplingGraphs.instances] == [(1, 8), (1, 8)]
    (training,) = CountedCaptures.instances
    assert training.captured == 1  # rendering samples made no step capture again
    assert runs["on"].losses == pytest.approx(runs["off"].losses, rel=1e-3)
    # the last samples (step 4) drawn again eagerly from the same weights: the run's result MODEL
    with torch.inference_mode(False):
        eager, _ = render_samples(runs["on"].patcher, samples, 4, str(tmp_path / "eager_samples"))
    difference = (runs["on"].samples - eager).abs().max()
    assert difference < 1e-3, difference
