"""Issue 48 as users run it: Flux.1's T5-XXL trained alone through ComfyUI's executor (every node under
torch.inference_mode): AdapterOptions' text_encoders names it and train_diffusion_model is off, the
graph's CLIP linked to LoRATrainer. SaveLoRA's file holds T5's blocks alone, which stock LoraLoader
loads with zero unmatched keys (test_text_encoder_families: the conditioning it gives is the trained one)."""

import json
import logging
import os

import pytest
import safetensors.torch
import torch

from devkit import tiny_family_node
from devkit.stock_comfyui import relative_error
from devkit.tiny_models import build_tiny, family_params
from devkit.workflow import QUICK, Outcome, load_extension, run_prompt, training_prompt

PROMPT = "a photo of sks dog"


@pytest.fixture(scope="module")
def registered():
    mappings = load_extension()
    tiny_family_node.register()
    return mappings


def encoding(clip):
    with torch.inference_mode():
        return clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))[0][0]


@pytest.mark.parametrize("family", family_params(["flux_dev"]))
def test_t5_trained_alone_through_the_executor_saves_its_blocks_alone_and_loraloader_loads_them(
    family, registered, dog_dataset, comfy_dirs, caplog
):
    import folder_paths
    import nodes

    settings = {**QUICK, "steps": 6, "rank": 8, "alpha": 8.0, "run_name": "t5_alone"}
    settings.update(text_encoder_lr=3e-2, text_encoders="t5xxl", train_diffusion_model=False)
    stack = {"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": family, "seed": 0}}
    prompt = training_prompt(
        dog_dataset.folder, settings, stack=stack, train_text_encoder=True, save={"filename_prefix": "t5_alone/te"}
    )
    executor, _ = run_prompt(prompt)
    outcome = Outcome(executor, os.path.join(folder_paths.get_output_directory(), "t5_alone"))
    assert outcome.success, outcome.error
    with open(os.path.join(outcome.run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["eval_loss_after"] < summary["eval_loss_before"], summary
    path = os.path.join("t5_alone", "te.safetensors")
    keys = safetensors.torch.load_file(os.path.join(comfy_dirs["loras"], path)).keys()
    assert keys and all(k.startswith("text_encoders.t5xxl.transformer.encoder.block.") for k in keys)
    model, clip, _ = build_tiny(family, seed=0)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _, loaded = nodes.LoraLoader().load_lora(model, clip, path, 1.0, 1.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]
    assert relative_error(encoding(loaded), encoding(clip)) > 1e-3  # (its conditioning reproduced: the families test)


@pytest.mark.parametrize("family", family_params(["qwen_image_edit"]))
def test_qwen_image_edits_encoder_trains_on_pictures_prompts_through_the_executor(
    family, registered, datasets_dir, tmp_path, comfy_dirs, caplog
):
    # edit pairs whose instructions the encoder reads shown their references (CacheLatents encodes them as
    # TextEncodeQwenImageEditPlus does), the encoder trained beside the diffusion model
    import folder_paths
    import nodes

    from devkit.edit_pairs import make_edit_pairs

    photos = os.path.join(datasets_dir, "dreambooth_dog")
    folder = make_edit_pairs(photos, str(tmp_path / "pairs"), ("00", "01", "02", "03"), 1)
    settings = {**QUICK, "steps": 6, "rank": 8, "alpha": 8.0, "targets": "all-linear", "run_name": "qwen_edit_te"}
    settings.update(text_encoder_lr=3e-2, text_encoders="qwen25_7b")
    stack = {"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": family, "seed": 0}}
    prompt = training_prompt(
        folder, settings, stack=stack, train_text_encoder=True, save={"filename_prefix": "qwen_edit_te/lora"}
    )
    executor, _ = run_prompt(prompt)
    outcome = Outcome(executor, os.path.join(folder_paths.get_output_directory(), "qwen_edit_te"))
    assert outcome.success, outcome.error
    path = os.path.join("qwen_edit_te", "lora.safetensors")
    keys = safetensors.torch.load_file(os.path.join(comfy_dirs["loras"], path)).keys()
    encoder_keys = [k for k in keys if k.startswith("text_encoders.qwen25_7b.transformer.model.layers.")]
    assert encoder_keys and len(encoder_keys) < len(keys)  # the encoder's blocks beside the diffusion model's
    assert not [k for k in keys if ".visual." in k]
    model, clip, _ = build_tiny(family, seed=0)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        nodes.LoraLoader().load_lora(model, clip, path, 1.0, 1.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]
