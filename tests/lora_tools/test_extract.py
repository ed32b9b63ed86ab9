"""Extracting a LoRA from a model made by merging a known LoCon into the base: from two weight files
and from two ComfyUI MODELs, matched on the model's output and per layer."""

import safetensors.torch
import torch

from devkit.stock_comfyui import layer_deltas, load_with_stock_comfyui, relative_error
from eridiffusion.comfy_compat import patched_diffusion_weights
from eridiffusion.lora_tools.extract import extract_from_files, extract_from_models


def test_extract_from_two_weight_files_gives_back_the_lora_at_its_rank(locon_files, tmp_path, caplog):
    model, probe, source = locon_files["model"], locon_files["probe"], locon_files["files"][0]
    tuned, _ = load_with_stock_comfyui(model, source, 1.0, caplog)
    base_path, tuned_path = str(tmp_path / "base.safetensors"), str(tmp_path / "tuned.safetensors")
    safetensors.torch.save_file(patched_diffusion_weights(model), base_path)
    safetensors.torch.save_file(patched_diffusion_weights(tuned), tuned_path)
    result = extract_from_files(base_path, tuned_path, str(tmp_path / "x.safetensors"), rank=8, dtype="fp32")
    extracted, unmatched = load_with_stock_comfyui(model, result.path, 1.0, caplog)
    assert unmatched == []
    assert relative_error(probe.output(extracted), probe.output(tuned)) < 1e-4
    assert (
        len(result.layers) == len(layer_deltas(source)) and min(layer.kept_energy for layer in result.layers) > 0.9999
    )


def test_extract_from_two_models_matches_each_layers_weight_change(locon_files, tmp_path, caplog):
    model, probe, source = locon_files["model"], locon_files["probe"], locon_files["files"][0]
    tuned, _ = load_with_stock_comfyui(model, source, 1.0, caplog)
    result = extract_from_models(model, tuned, str(tmp_path / "x.safetensors"), rank=8, dtype="fp32")
    extracted, unmatched = load_with_stock_comfyui(model, result.path, 1.0, caplog)
    assert unmatched == []
    assert relative_error(probe.output(extracted), probe.output(tuned)) < 1e-4
    known, found = layer_deltas(source), layer_deltas(result.path)
    assert set(found) == set(known)  # the keys SaveLoRA writes for this model
    worst = max(relative_error(found[k], known[k]) for k in known)
    assert worst < 1e-4, worst


def test_extract_at_an_energy_share_keeps_it_in_every_layer(locon_files, tmp_path, caplog):
    model, source = locon_files["model"], locon_files["files"][0]
    tuned, _ = load_with_stock_comfyui(model, source, 1.0, caplog)
    result = extract_from_models(model, tuned, str(tmp_path / "x.safetensors"), energy=0.8, dtype="fp32")
    assert min(layer.kept_energy for layer in result.layers) >= 0.8
    assert (
        max(layer.rank_after for layer in result.layers) <= 8 and min(layer.rank_after for layer in result.layers) < 8
    )
    assert torch.isfinite(torch.tensor([layer.kept_energy for layer in result.layers])).all()
