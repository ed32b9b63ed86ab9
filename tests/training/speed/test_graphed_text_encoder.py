"""With CUDA graphs and the text encoder trained, the encoder's transformer replays from graphs of
its own: one per encoding of a micro-batch (two captions a step: two) and caption length, its adapters'
gradients coming out of the replayed backward, training what an eager run trains; evaluation
(no gradients) encodes eagerly. Needs a CUDA device (run on the GPU machine: see bench/gpu_host.sh)."""

import dataclasses

import pytest
import torch

from devkit.short_runs import encoding_changes
from devkit.short_runs import short_run as config
from eridiffusion.training.run.trainer import train_lora
from eridiffusion.training.speed import graphed_text_encoder

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


class Counted(graphed_text_encoder.GraphedCall):
    """GraphedCall that keeps its instances and counts the encodings it replayed."""

    instances = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.replayed = 0
        Counted.instances.append(self)

    def __call__(self, batch):
        out = super().__call__(batch)
        self.replayed += out is not None
        return out


def test_the_encoder_replays_one_graph_per_encoding_and_trains_what_an_eager_run_trains(
    quality_stack, tmp_path, monkeypatch
):
    model, clip, _, data = quality_stack
    data = dataclasses.replace(data, validation=None)
    monkeypatch.setattr(graphed_text_encoder, "GraphedCall", Counted)
    monkeypatch.setattr(Counted, "instances", [])
    runs = {}
    with torch.inference_mode(False):
        for setting in ("off", "on"):
            settings = config(setting, setting, text_encoder_lr=3e-3, batch_size=2, eval_images=1)
            runs[setting] = train_lora(model, data, settings, str(tmp_path / setting), clip=clip)
    (encoder,) = Counted.instances  # SD1.5: CLIP-L's transformer
    assert encoder.replayed == 4 * 2  # 4 steps, 2 captions each; evaluation encoded eagerly
    # a graph per encoding of a micro-batch (and per caption length: CLIP picks the pooled token by it)
    settings = [dict(key[1]) for key in encoder.graphs]
    assert {s["eridiffusion_encoding"] for s in settings} == {("int", 0), ("int", 1)}
    assert len(settings) == len({(s["eridiffusion_encoding"], s["num_tokens"]) for s in settings})
    assert runs["on"].losses == pytest.approx(runs["off"].losses, rel=1e-3)
    change, apart = encoding_changes(clip, runs["off"], runs["on"])
    assert change > 1e-2 and apart <= 0.03 * change  # as test_cuda_graphs's text-encoder test
