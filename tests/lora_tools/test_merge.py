"""Merging two trained LoCons: exact mode against ComfyUI applying both, SVD-compressed mode converging
with rank, and the refusal of mixed algorithms."""

import pytest
import safetensors.torch
import torch

from devkit.stock_comfyui import load_with_stock_comfyui, relative_error
from eridiffusion.errors import EriDiffusionError
from eridiffusion.lora_tools.merge import merge_loras

WEIGHTS = (0.8, -0.5)


def _both_applied(model, files, caplog):
    """Stock ComfyUI with both LoRAs loaded on the model (LoraLoader twice), at WEIGHTS."""
    patched = model
    for path, weight in zip(files, WEIGHTS):
        patched, unmatched = load_with_stock_comfyui(patched, path, weight, caplog)
        assert unmatched == []
    return patched


def test_exact_merge_reproduces_applying_both_loras_to_1e_5(locon_files, tmp_path, caplog):
    model, probe, files = locon_files["model"], locon_files["probe"], locon_files["files"]
    result = merge_loras(list(zip(files, WEIGHTS)), str(tmp_path / "merged.safetensors"))
    merged, unmatched = load_with_stock_comfyui(model, result.path, 1.0, caplog)
    assert unmatched == []
    reference = probe.output(_both_applied(model, files, caplog))
    assert relative_error(probe.output(merged), reference) < 1e-5
    assert relative_error(probe.output(model), reference) > 1e-2  # the LoRAs do change the output
    assert {layer.rank_after for layer in result.layers} == {16}


def test_compressed_merge_converges_to_the_exact_one_with_rank(locon_files, tmp_path, caplog):
    model, probe, files = locon_files["model"], locon_files["probe"], locon_files["files"]
    reference = probe.output(_both_applied(model, files, caplog))
    errors, kept = [], []
    for rank in (2, 8, 16):
        result = merge_loras(list(zip(files, WEIGHTS)), str(tmp_path / f"m{rank}.safetensors"), rank=rank)
        merged, unmatched = load_with_stock_comfyui(model, result.path, 1.0, caplog)
        assert unmatched == []
        errors.append(relative_error(probe.output(merged), reference))
        kept.append(min(layer.kept_energy for layer in result.layers))
    assert errors[0] > errors[1] > errors[2] and errors[2] < 1e-5, errors
    assert kept[0] < kept[1] < kept[2] and kept[2] > 1 - 1e-6, kept


def test_merging_a_lora_with_a_lokr_is_refused_naming_both(locon_files, tmp_path):
    lokr = str(tmp_path / "lokr.safetensors")
    safetensors.torch.save_file(
        {"lora_unet_x.lokr_w1": torch.ones(2, 2), "lora_unet_x.lokr_w2": torch.ones(4, 4)}, lokr
    )
    with pytest.raises(
        EriDiffusionError, match=r"merge mixes algorithms \(.*locon_0.safetensors: lora; .*lokr.safetensors: lokr\)"
    ):
        merge_loras([(locon_files["files"][0], 1.0), (lokr, 1.0)], str(tmp_path / "out.safetensors"))
    assert not (tmp_path / "out.safetensors").exists()
