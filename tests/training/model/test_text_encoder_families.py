"""Issue 48: the text encoders the 2026 models use train, alone (no diffusion-model adapters): T5-XXL
(Flux.1), UMT5-XXL (Wan), Qwen2.5-VL (Qwen-Image), Qwen3 (Z-Image), Mistral (Flux.2-dev), Gemma 3
(LTX-2), each chosen by name where a CLIP holds several. The saved file holds the chosen encoder's
blocks alone (never a vision tower), under the generic `text_encoders.` keys stock LoraLoader maps,
and reproduces the trained CLIP's conditioning there; the input CLIP is untouched; a stop and resume
gives the uninterrupted run."""

import gc
import logging
import os

import comfy.sd
import comfy.utils
import pytest
import torch

from devkit.photo_clips import CLIP_FRAMES
from devkit.stock_comfyui import merged_tolerance, relative_error
from devkit.tiny_models import TINY_FAMILIES, build_tiny, family_params
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.model.text_encoder import check_text_encoders
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.resume import load_resume_point
from eridiffusion.training.run.trainer import train_lora

PROMPT = "a photo of sks dog, on a beach"
# {tiny family: the encoder trained alone}: one family per encoder class ComfyUI loads for them
ENCODERS = {
    "flux_dev": "t5xxl",
    "wan21_t2v": "umt5xxl",
    "qwen_image": "qwen25_7b",
    "z_image": "qwen3_4b",
    "flux2": "mistral3_24b",
    "ltx2": "gemma3_12b",
}
STEPS, RATE = 30, 3e-2
_RUNS = {}


def encode(clip):
    with torch.inference_mode():
        return clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))


def training_data(name, request, folder):
    family = TINY_FAMILIES[name]
    model, clip, vae = build_tiny(name, seed=0)
    if family.video_frames:
        clips = request.getfixturevalue("dog_clips")
        frames = family.video_frames
        dataset = clips if frames == CLIP_FRAMES else load_dataset(clips.folder, frames=frames, fps=16.0)
    else:
        dataset = request.getfixturevalue("dog_dataset")
    with torch.inference_mode():
        data = build_training_data(dataset, vae, clip, family.resolution, os.path.join(folder, "cache"))
    data.samples = data.samples[:4]
    return model, clip, data


def te_config(encoders, steps=STEPS, **overrides):
    adapter = AdapterSpec(rank=8, alpha=8.0, text_encoders=encoders, train_diffusion_model=False)
    settings = dict(steps=steps, learning_rate=1e-4, text_encoder_lr=RATE, dtype="fp32", seed=0, log_every=10)
    settings.update(gradient_checkpointing=False, run_name="te", adapter=adapter)
    return TrainConfig(**{**settings, **overrides})


def trained_run(name, request, tmp_path_factory):
    """The family's encoder trained alone, once per worker."""
    if name not in _RUNS:
        folder = str(tmp_path_factory.mktemp(f"te_{name}"))
        model, clip, data = training_data(name, request, folder)
        before = encode(clip)
        with torch.inference_mode(False):
            result = train_lora(model, data, te_config(ENCODERS[name]), os.path.join(folder, "run"), clip=clip)
        _RUNS[name] = {"name": name, "model": model, "clip": clip, "result": result, "before": before}
    return _RUNS[name]


@pytest.fixture(scope="module", autouse=True)
def _release_runs():
    """Drop the runs while ComfyUI's modules still exist (its patchers' finalizers need them)."""
    yield
    _RUNS.clear()
    gc.collect()


@pytest.fixture(params=family_params(sorted(ENCODERS)))
def run(request, tmp_path_factory):
    return trained_run(request.param, request, tmp_path_factory)


def test_the_encoder_alone_lowers_the_evaluation_loss(run):
    result = run["result"]
    assert result.eval_loss_after < result.eval_loss_before, (result.eval_loss_before, result.eval_loss_after)


def test_the_file_holds_the_chosen_encoders_blocks_alone_under_generic_keys(run):
    keys = run["result"].lora.tensors
    encoder = ENCODERS[run["name"]]
    assert keys and all(k.startswith(f"text_encoders.{encoder}.transformer.") for k in keys), sorted(keys)[:3]
    assert not [k for k in keys if ".visual." in k or ".vision_model." in k]
    blocks = {k.split(".")[5] for k in keys}  # every block of the encoder's text transformer
    assert len(blocks) > 1


def test_stock_loraloader_loads_every_key_and_reproduces_the_trained_conditioning(run, tmp_path, caplog):
    path = run["result"].lora.save(str(tmp_path / "te.safetensors"), dtype="fp32")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _, clip = comfy.sd.load_lora_for_models(run["model"], run["clip"], comfy.utils.load_torch_file(path), 1.0, 1.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage() or "NOT LOADED" in r.getMessage()]
    ours, theirs = encode(run["result"].clip), encode(clip)
    assert relative_error(theirs[0][0], ours[0][0]) < merged_tolerance(clip.patcher)
    assert relative_error(ours[0][0], run["before"][0][0]) > 1e-3


def test_the_input_clip_encodes_bit_identically_after_training(run):
    assert torch.equal(encode(run["clip"])[0][0], run["before"][0][0])


@pytest.mark.parametrize("name", family_params(["flux_dev"]))
def test_both_flux_encoders_alone_lower_the_evaluation_loss_30_percent_and_resume_exactly(name, request, tmp_path):
    # CLIP-L's pooled output modulates every Flux block: trained with T5, the encoders alone carry the
    # run's learning (T5 alone, reaching the image only through its tokens in the joint attention of a
    # random tiny model, moves it less: test_the_encoder_alone_lowers_the_evaluation_loss)
    model, clip, data = training_data(name, request, str(tmp_path))
    config = te_config("clip_l, t5xxl", steps=40, save_every=20, log_every=20, run_name="both")
    with torch.inference_mode(False):
        whole = train_lora(model, data, config, str(tmp_path / "whole"), clip=clip)
        point = load_resume_point(str(tmp_path / "whole" / "checkpoints" / "both_step000020.safetensors"))
        resumed = train_lora(model, data, config, str(tmp_path / "resumed"), clip=clip, resume=point)
    assert whole.eval_loss_after < 0.7 * whole.eval_loss_before, (whole.eval_loss_before, whole.eval_loss_after)
    a, b = whole.lora.tensors, resumed.lora.tensors
    # CLIP-L under kohya's names (as SD1.5's), T5 under the generic ones
    assert {"lora_te_" if k.startswith("lora_te_") else k.split(".")[1] for k in a} == {"lora_te_", "t5xxl"}
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6


@pytest.mark.parametrize("name", family_params(["flux_dev"]))
def test_an_encoder_the_clip_lacks_is_named_with_those_it_holds(name):
    _, clip, _ = build_tiny(name, seed=0)
    with pytest.raises(EriDiffusionError) as error:
        check_text_encoders(clip, "t5xxl, umt5xxl")
    assert str(error.value) == (
        "text_encoders names 'umt5xxl', which the connected CLIP does not hold: it holds clip_l, t5xxl; "
        "name those to train (empty: its CLIP encoders, else every one)."
    )
    check_text_encoders(clip, "t5xxl")  # held: no error


def test_nothing_to_train_is_refused_with_the_fix():
    with pytest.raises(EriDiffusionError, match="train_diffusion_model is off and text_encoder_lr is 0"):
        te_config("", text_encoder_lr=0.0)


@pytest.mark.parametrize("name", family_params(["qwen_image"]))
def test_the_toolbox_reads_and_resizes_an_encoders_file(name, request, tmp_path_factory, tmp_path, caplog):
    # inspect counts the encoder's layers as LoRA; resize cuts them, and the cut file still loads every key
    from eridiffusion.lora_tools.inspection import inspect_lora
    from eridiffusion.lora_tools.resize import resize_lora

    run = trained_run(name, request, tmp_path_factory)
    path = run["result"].lora.save(str(tmp_path / "te.safetensors"), dtype="fp32")
    layers = len({k.rsplit(".", 2)[0] for k in run["result"].lora.tensors if k.endswith("lora_down.weight")})
    assert inspect_lora(path).algorithms == {"lora": layers}
    resize_lora(path, str(tmp_path / "small.safetensors"), rank=2)
    small = comfy.utils.load_torch_file(str(tmp_path / "small.safetensors"))
    downs = [v for k, v in small.items() if k.endswith("lora_down.weight")]
    assert len(downs) == layers and all(v.shape[0] == 2 for v in downs)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        comfy.sd.load_lora_for_models(run["model"], run["clip"], small, 1.0, 1.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"adapter": AdapterSpec(text_encoders="t5xxl")},
            "text_encoders 't5xxl' names encoders to train, and text_encoder_lr is 0: set text_encoder_lr (about the "
            "learning_rate), or clear text_encoders.",
        ),
        (
            {"adapter": AdapterSpec(train_diffusion_model=False), "text_encoder_lr": 1e-4, "block_lr": "double:0.5"},
            "block_lr sets the rates of the diffusion model's blocks, and train_diffusion_model is off (the text "
            "encoders alone train): clear block_lr, or turn train_diffusion_model on.",
        ),
    ],
    ids=["encoders without a rate", "block rates without the diffusion model"],
)
def test_settings_that_would_train_other_than_asked_are_refused(overrides, message):
    with pytest.raises(EriDiffusionError) as error:
        TrainConfig(**{"steps": 2, **overrides})
    assert str(error.value) == message


@pytest.mark.parametrize("name", family_params(["flux_dev"]))
def test_a_resume_file_of_the_other_kind_is_refused_before_any_image_is_encoded(name, tmp_path):
    # a file with the diffusion model's layers, resumed with train_diffusion_model off; one of T5's alone, with it on
    from eridiffusion.training.run.resume import check_resume_fits

    model, clip, _ = build_tiny(name, seed=0)
    unet = ("lora_unet_double_blocks_0_img_attn_qkv", model.model.diffusion_model.double_blocks[0].img_attn.qkv.weight)
    t5 = "t5xxl.transformer.encoder.block.0.layer.0.SelfAttention.q"
    t5 = (f"text_encoders.{t5}", clip.cond_stage_model.get_parameter(f"{t5}.weight"))
    cases = [(unet, te_config("t5xxl"), "diffusion-model weights"), (t5, TrainConfig(text_encoder_lr=1e-4), "alone")]
    for (prefix, weight), config, found in cases:
        path = str(tmp_path / "file.safetensors")
        rows, columns = weight.shape
        down, up = torch.zeros(4, columns), torch.zeros(rows, 4)
        comfy.utils.save_torch_file({f"{prefix}.lora_down.weight": down, f"{prefix}.lora_up.weight": up}, path)
        with pytest.raises(EriDiffusionError, match=found) as error:
            check_resume_fits(load_resume_point(path), model, clip, config)
        assert str(error.value).startswith(path)


@pytest.mark.parametrize("name", family_params(["flux_dev", "qwen_image"]))
def test_left_empty_the_clip_encoders_train_where_there_are_any_else_every_encoder(name):
    # as before this issue, and as kohya's Flux trainer: T5-XXL trains only when named
    from eridiffusion.formats.lora_file import loadable_clip_keys
    from eridiffusion.training.model.text_encoder import text_encoder_layers

    _, clip, _ = build_tiny(name, seed=0)
    layers = text_encoder_layers(loadable_clip_keys(clip.cond_stage_model))
    assert {k.split(".", 1)[0] for k in layers} == {"flux_dev": {"clip_l"}, "qwen_image": {"qwen25_7b"}}[name]
