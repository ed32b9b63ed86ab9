"""Issue 48: Qwen-Image-Edit's Qwen2.5-VL trains on edit pairs whose instructions it reads shown their
reference images (TextEncodeQwenImageEditPlus's picture prompt): every step encodes the instruction with
its pictures through the adapted encoder, the vision tower computing each picture's tokens once; the file
loads in stock LoraLoader with every key and reproduces the trained CLIP's picture prompt; the input
CLIP is untouched."""

import os

import pytest
import torch

from devkit.edit_pairs import INSTRUCTION, make_edit_pairs
from devkit.stock_comfyui import load_with_stock_comfyui, merged_tolerance, relative_error
from devkit.tiny_models import TINY_FAMILIES, build_tiny, family_params
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.picture_prompts import encode_picture_prompt, shown_picture
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.run.trainer import train_lora

from .test_text_encoder_families import te_config

STEMS = ("00", "01", "02", "03")
STEPS = 30


def picture_prompt(clip, path):
    with torch.inference_mode():
        return encode_picture_prompt(clip, INSTRUCTION, [shown_picture(path)])


@pytest.fixture(scope="module", params=family_params(["qwen_image_edit"]))
def edit_run(request, datasets_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("te_edit")
    folder = make_edit_pairs(os.path.join(datasets_dir, "dreambooth_dog"), str(root / "pairs"), STEMS, 1)
    model, clip, vae = build_tiny(request.param, seed=0)
    with torch.inference_mode():
        data = build_training_data(load_dataset(folder), vae, clip, TINY_FAMILIES[request.param].resolution, str(root))
    reference = os.path.join(folder, "control", "00.png")
    before = picture_prompt(clip, reference)
    encoder = clip.cond_stage_model.qwen25_7b.transformer
    calls = {"vision": 0, "text": 0}
    hooks = [
        encoder.visual.register_forward_hook(lambda *_: calls.__setitem__("vision", calls["vision"] + 1)),
        encoder.model.layers[0].self_attn.q_proj.register_forward_hook(
            lambda *_: calls.__setitem__("text", calls["text"] + 1)
        ),
    ]
    config = te_config("qwen25_7b", steps=STEPS, gradient_checkpointing=True)
    try:
        with torch.inference_mode(False):
            result = train_lora(model, data, config, str(root / "run"), clip=clip)
    finally:
        for hook in hooks:
            hook.remove()
    return {"model": model, "clip": clip, "result": result, "reference": reference, "before": before, "calls": calls}


def test_every_step_encodes_the_pictures_whose_tokens_the_vision_tower_computes_once(edit_run):
    calls = edit_run["calls"]
    assert calls["text"] >= STEPS  # the instruction through the adapted encoder every step
    # shown its picture every step, each picture's tokens computed once (training and evaluation)
    assert calls["vision"] == len(STEMS), calls
    result = edit_run["result"]
    assert result.eval_loss_after < result.eval_loss_before, (result.eval_loss_before, result.eval_loss_after)


def test_stock_loraloader_loads_every_key_and_reproduces_the_trained_picture_prompt(edit_run, tmp_path, caplog):
    path = edit_run["result"].lora.save(str(tmp_path / "te_edit.safetensors"), dtype="fp32")
    _, clip, unmatched = load_with_stock_comfyui(edit_run["model"], path, 1.0, caplog, edit_run["clip"], 1.0)
    assert unmatched == []
    ours = picture_prompt(edit_run["result"].clip, edit_run["reference"])
    theirs = picture_prompt(clip, edit_run["reference"])
    assert relative_error(theirs[0][0], ours[0][0]) < merged_tolerance(clip.patcher)
    assert relative_error(ours[0][0], edit_run["before"][0][0]) > 1e-3


def test_the_input_clip_encodes_the_picture_prompt_bit_identically_after_training(edit_run):
    after = picture_prompt(edit_run["clip"], edit_run["reference"])
    assert torch.equal(after[0][0], edit_run["before"][0][0])


@pytest.mark.parametrize("name", family_params(["qwen_image_edit"]))
def test_a_reference_image_gone_since_caching_is_refused_naming_it_before_training(name, datasets_dir, tmp_path):
    folder = make_edit_pairs(os.path.join(datasets_dir, "dreambooth_dog"), str(tmp_path / "pairs"), ("00", "01"), 1)
    model, clip, vae = build_tiny(name, seed=0)
    with torch.inference_mode():
        data = build_training_data(load_dataset(folder), vae, clip, TINY_FAMILIES[name].resolution, str(tmp_path))
    gone = os.path.join(folder, "control", "01.png")
    os.remove(gone)
    with pytest.raises(EriDiffusionError) as error, torch.inference_mode(False):
        train_lora(model, data, te_config("qwen25_7b", steps=2), str(tmp_path / "run"), clip=clip)
    assert str(error.value).startswith(f"{gone} is gone (1 of the reference images missing)")
    assert not os.path.exists(tmp_path / "run")  # refused before the run began
