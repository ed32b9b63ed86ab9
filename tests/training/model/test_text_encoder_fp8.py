"""Issue 48: a text encoder loaded in fp8 trains in fp8, as the 2026 templates load them: Flux's
t5xxl_fp8_e4m3fn (every weight float8, ComfyUI's manual_cast layers), Wan's umt5_xxl_fp8_e4m3fn_scaled
and Qwen-Image's qwen_2.5_vl_7b_fp8_scaled (ComfyUI 0.28: mixed-precision layers holding
QuantizedTensors), each built by ComfyUI's own detection of the file. The adapters train on those layers
as the graph loaded them (no full-precision copy of the encoder), the input CLIP is untouched, and the
saved file loads in stock ComfyUI on the fp8 CLIP with no unmatched key: bypassed (ComfyUI's loading for
quantized weights) it gives the trained conditioning, merged (LoraLoader) it moves the conditioning as
training did, up to the rounding of each merged weight back to float8."""

import dataclasses
import logging
import os

import comfy.sd
import comfy.utils
import pytest
import torch

from devkit.photo_clips import CLIP_FRAMES
from devkit.quantized_bases import LOADS_PER_LAYER_QUANTIZATION, tiny_clip_fp8
from devkit.stock_comfyui import merged_tolerance, relative_error
from devkit.tiny_flux import T5_TINY
from devkit.tiny_models import TINY_FAMILIES, build_tiny
from devkit.tiny_qwen_image import LLAMA_TINY
from devkit.tiny_stack import borrowed_spiece_model
from devkit.tiny_wan import UMT5_TINY
from eridiffusion.tiny_models import CLIP_L
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora

PROMPT = "a photo of sks dog, on a beach"
SCALED = pytest.mark.skipif(not LOADS_PER_LAYER_QUANTIZATION, reason="this ComfyUI loads no fp8_scaled file")
# (tiny family, its encoder, fp8_scaled, the tiny sizes the family's CLIP is built with)
FILES = {
    "t5xxl_fp8_e4m3fn": ("flux_dev", "t5xxl", False, {"clip_l_model_config": CLIP_L, "t5xxl_model_config": T5_TINY}),
    "umt5_xxl_fp8_e4m3fn_scaled": ("wan21_t2v", "umt5xxl", True, {"umt5xxl_model_config": UMT5_TINY}),
    "qwen_2.5_vl_7b_fp8_scaled": ("qwen_image", "qwen25_7b", True, {"qwen25_7b_model_config": LLAMA_TINY}),
}


def encode(clip):
    with torch.inference_mode():
        return clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))[0][0]


def fp8_weights(clip, encoder):
    """{name: the stored bytes} of the encoder's float8 weights (a QuantizedTensor's: its data and scale)."""
    held = {}
    for name, p in getattr(clip.cond_stage_model, encoder).named_parameters():
        if hasattr(p, "_qdata"):
            held[name] = (p._qdata.view(torch.uint8).clone(), p._params.scale.clone())
        elif p.dtype == torch.float8_e4m3fn:
            held[name] = (p.detach().view(torch.uint8).clone(),)
    return held


def dataset_of(name, request):
    frames = TINY_FAMILIES[name].video_frames
    if not frames:
        return request.getfixturevalue("dog_dataset")
    clips = request.getfixturevalue("dog_clips")
    return clips if frames == CLIP_FRAMES else load_dataset(clips.folder, frames=frames, fps=16.0)


@pytest.fixture(
    scope="module",
    params=[pytest.param(file, marks=[SCALED] if FILES[file][2] else []) for file in FILES],
)
def trained(request, tmp_path_factory):
    name, encoder, scaled, te_options = FILES[request.param]
    folder = str(tmp_path_factory.mktemp("fp8_encoder"))
    model, clip, vae = build_tiny(name, seed=0)
    spiece = borrowed_spiece_model() if encoder == "umt5xxl" else None
    clip = tiny_clip_fp8(model, clip, encoder, te_options, scaled, tokenizer_data=spiece)
    with torch.inference_mode():
        data = build_training_data(
            dataset_of(name, request), vae, clip, TINY_FAMILIES[name].resolution, os.path.join(folder, "cache")
        )
    data = dataclasses.replace(data, samples=data.samples[:4])
    weights = fp8_weights(clip, encoder)
    before = encode(clip)
    adapter = AdapterSpec(rank=8, alpha=8.0, text_encoders=encoder, train_diffusion_model=False)
    config = TrainConfig(
        steps=30,
        learning_rate=1e-4,
        text_encoder_lr=3e-2,
        dtype="fp32",
        seed=0,
        log_every=10,
        gradient_checkpointing=False,
        run_name="fp8_encoder",
        adapter=adapter,
    )
    with torch.inference_mode(False):
        result = train_lora(model, data, config, os.path.join(folder, "run"), clip=clip)
    return {"model": model, "clip": clip, "encoder": encoder, "result": result, "before": before, "weights": weights}


def test_the_fp8_encoder_trains_in_fp8_and_the_input_clip_is_untouched(trained):
    result, weights, encoder = trained["result"], trained["weights"], trained["encoder"]
    assert len(weights) > 10  # (the encoder's linear layers, as the fp8 file loads them)
    assert result.eval_loss_after < result.eval_loss_before, (result.eval_loss_before, result.eval_loss_after)
    assert fp8_weights(result.clip, encoder).keys() == weights.keys()  # the trained CLIP computes from float8
    for name, stored in fp8_weights(trained["clip"], encoder).items():  # and the input's are as they came
        assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(stored, weights[name], strict=True)), name
    assert torch.equal(encode(trained["clip"]), trained["before"])


def test_stock_comfyui_loads_every_key_on_the_fp8_clip_and_reproduces_the_training(trained, tmp_path, caplog):
    result = trained["result"]
    path = result.lora.save(str(tmp_path / "encoder.safetensors"), dtype="fp32")
    lora = comfy.utils.load_torch_file(path)
    assert lora and all(k.startswith(f"text_encoders.{trained['encoder']}.transformer.") for k in lora)
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
    # merged, each weight is rounded back to float8 (ComfyUI 0.28 on the CPU, Flux's T5: 0.4% of the change)
    taught, moved = ours - before, encode(merged) - before
    assert relative_error(moved, taught) < 0.05, relative_error(moved, taught)
