"""Issue 48: a text encoder loaded in fp8 trains in fp8. Flux users load T5-XXL as
t5xxl_fp8_e4m3fn.safetensors (ComfyUI keeps its weights in float8 and computes through manual_cast
layers) or t5xxl_fp8_e4m3fn_scaled.safetensors (ComfyUI 0.28: mixed-precision layers holding
QuantizedTensors). The adapters train on those layers as the graph loaded them (no full-precision copy
of the encoder), the input CLIP is untouched, and the saved file loads in stock ComfyUI on the fp8 CLIP
with no unmatched key: bypassed (ComfyUI's loading for quantized weights) it gives the trained
conditioning, merged (LoraLoader) it moves the conditioning as training did, up to fp8's rounding of
each merged weight."""

import dataclasses
import logging
import os

import comfy.sd
import comfy.utils
import pytest
import torch

from devkit.quantized_bases import LOADS_PER_LAYER_QUANTIZATION, tiny_flux_clip_fp8
from devkit.stock_comfyui import merged_tolerance, relative_error
from devkit.tiny_models import build_tiny
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora

PROMPT = "a photo of sks dog, on a beach"


def encode(clip):
    with torch.inference_mode():
        return clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))[0][0]


def t5_weights(clip):
    """{name: the stored bytes} of the T5's float8 weights (a QuantizedTensor's: its data and scale)."""
    held = {}
    for name, p in clip.cond_stage_model.t5xxl.named_parameters():
        if hasattr(p, "_qdata"):
            held[name] = (p._qdata.view(torch.uint8).clone(), p._params.scale.clone())
        elif p.dtype == torch.float8_e4m3fn:
            held[name] = (p.detach().view(torch.uint8).clone(),)
    return held


@pytest.fixture(
    scope="module",
    params=[
        "fp8_e4m3fn",
        pytest.param(
            "fp8_e4m3fn_scaled",
            marks=pytest.mark.skipif(not LOADS_PER_LAYER_QUANTIZATION, reason="this ComfyUI loads no scaled fp8"),
        ),
    ],
)
def trained(request, dog_dataset, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("fp8_t5"))
    model, clip, vae = build_tiny("flux_dev", seed=0)
    clip = tiny_flux_clip_fp8(clip, scaled=request.param.endswith("scaled"))
    with torch.inference_mode():
        data = build_training_data(dog_dataset, vae, clip, 64, os.path.join(folder, "cache"))
    data = dataclasses.replace(data, samples=data.samples[:4])
    weights = t5_weights(clip)
    before = encode(clip)
    adapter = AdapterSpec(rank=8, alpha=8.0, text_encoders="t5xxl", train_diffusion_model=False)
    config = TrainConfig(
        steps=30,
        learning_rate=1e-4,
        text_encoder_lr=3e-2,
        dtype="fp32",
        seed=0,
        log_every=10,
        gradient_checkpointing=False,
        run_name="fp8_t5",
        adapter=adapter,
    )
    with torch.inference_mode(False):
        result = train_lora(model, data, config, os.path.join(folder, "run"), clip=clip)
    return {"model": model, "clip": clip, "result": result, "before": before, "weights": weights}


def test_the_fp8_encoder_trains_in_fp8_and_the_input_clip_is_untouched(trained):
    result, weights = trained["result"], trained["weights"]
    assert len(weights) > 10  # (T5's linear layers, as the fp8 file loads them)
    assert result.eval_loss_after < result.eval_loss_before, (result.eval_loss_before, result.eval_loss_after)
    assert t5_weights(result.clip).keys() == weights.keys()  # the trained CLIP computes from float8 weights
    for name, stored in t5_weights(trained["clip"]).items():  # and the input's are as they came
        assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(stored, weights[name], strict=True)), name
    assert torch.equal(encode(trained["clip"]), trained["before"])


def test_stock_comfyui_loads_every_key_on_the_fp8_clip_and_reproduces_the_training(trained, tmp_path, caplog):
    result = trained["result"]
    path = result.lora.save(str(tmp_path / "t5.safetensors"), dtype="fp32")
    lora = comfy.utils.load_torch_file(path)
    assert lora and all(k.startswith("text_encoders.t5xxl.transformer.") for k in lora)
    caplog.clear()
    bypass = getattr(comfy.sd, "load_bypass_lora_for_models", None)  # (ComfyUI 0.3.75 has none)
    with caplog.at_level(logging.WARNING):
        bypassed = None if bypass is None else bypass(trained["model"], trained["clip"], lora, 0.0, 1.0)[1]
        _, merged = comfy.sd.load_lora_for_models(trained["model"], trained["clip"], lora, 0.0, 1.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage() or "NOT LOADED" in r.getMessage()]
    ours, before = encode(result.clip), trained["before"]
    assert relative_error(ours, before) > 1e-3  # (training moved the conditioning)
    if bypassed is not None:
        assert relative_error(encode(bypassed), ours) < merged_tolerance(bypassed.patcher)
    # merged, each weight is rounded back to float8 (ComfyUI 0.28 on the CPU: 0.4% of the change)
    taught, moved = ours - before, encode(merged) - before
    assert relative_error(moved, taught) < 0.05, relative_error(moved, taught)
