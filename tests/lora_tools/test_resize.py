"""Resizing a trained LoCon: kept energy as reported and as measured, the output converging with rank,
the energy mode's smallest rank, and the refusals."""

import pytest
import safetensors.torch
import torch

from devkit.stock_comfyui import layer_deltas, load_with_stock_comfyui, relative_error
from eridiffusion.errors import EriDiffusionError
from eridiffusion.lora_tools.resize import resize_lora


def test_reported_kept_energy_matches_the_measured_norm_share_per_layer(locon_files, tmp_path):
    source = locon_files["files"][0]
    result = resize_lora(source, str(tmp_path / "r3.safetensors"), rank=3)
    before, after = layer_deltas(source), layer_deltas(result.path)
    gaps = []
    for layer in result.layers:
        measured = (after[layer.prefix].norm() / before[layer.prefix].norm()).item()
        gaps.append(abs(measured - layer.kept_energy))
        assert layer.rank_after == 3
    convs = [
        k
        for k, v in safetensors.torch.load_file(result.path).items()
        if k.endswith("lora_down.weight") and v.dim() == 4
    ]
    assert len(result.layers) == len(before) > 100 and len(convs) > 10
    assert max(gaps) < 1e-4, max(gaps)
    assert 0.3 < min(layer.kept_energy for layer in result.layers) < 1.0


def test_output_difference_to_the_full_lora_falls_monotonically_with_rank(locon_files, tmp_path, caplog):
    model, probe, source = locon_files["model"], locon_files["probe"], locon_files["files"][0]
    full, _ = load_with_stock_comfyui(model, source, 1.0, caplog)
    reference, base = probe.output(full), probe.output(model)
    errors = []
    for rank in (1, 2, 4, 8):
        path = resize_lora(source, str(tmp_path / f"r{rank}.safetensors"), rank=rank).path
        patched, unmatched = load_with_stock_comfyui(model, path, 1.0, caplog)
        assert unmatched == []
        errors.append(relative_error(probe.output(patched), reference))
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 1e-5 and errors[0] < relative_error(base, reference), errors


def test_energy_mode_keeps_the_share_with_the_smallest_rank(locon_files, tmp_path):
    source = locon_files["files"][0]
    result = resize_lora(source, str(tmp_path / "e.safetensors"), energy=0.9)
    before = layer_deltas(source)
    for layer in result.layers:
        s = torch.linalg.svdvals(before[layer.prefix].double())
        shares = (s.square().cumsum(0) / s.square().sum()).sqrt()
        assert shares[layer.rank_after - 1] >= 0.9 - 1e-6
        assert layer.rank_after == 1 or shares[layer.rank_after - 2] < 0.9
    assert len({layer.rank_after for layer in result.layers}) > 1  # the rank differs between layers


def test_a_dora_resized_keeps_its_magnitudes_and_converges_to_it_with_rank(family_lora, tmp_path, caplog):
    dora = family_lora("sdxl", "dora")
    model, probe = dora["model"], dora["probe"]
    full, _ = load_with_stock_comfyui(model, dora["path"], 1.0, caplog)
    reference, base = probe.output(full), probe.output(model)
    scales = {k: v for k, v in safetensors.torch.load_file(dora["path"]).items() if k.endswith(".dora_scale")}
    errors = []
    for rank in (1, 2, 4, 8):
        path = resize_lora(dora["path"], str(tmp_path / f"r{rank}.safetensors"), rank=rank).path
        patched, unmatched = load_with_stock_comfyui(model, path, 1.0, caplog)
        assert unmatched == []
        errors.append(relative_error(probe.output(patched), reference))
        resized = safetensors.torch.load_file(path)
        assert len(scales) == 153 and all(torch.equal(resized[k], v) for k, v in scales.items())
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 1e-5 and errors[0] < relative_error(base, reference), errors


def test_lokr_file_is_refused_naming_what_resize_supports(tmp_path):
    path = str(tmp_path / "lokr.safetensors")
    safetensors.torch.save_file(
        {"lora_unet_x.lokr_w1": torch.ones(2, 2), "lora_unet_x.lokr_w2": torch.ones(4, 4)}, path
    )
    with pytest.raises(EriDiffusionError, match=r"lokr \(1 layers\); resize handles LoRA, LoCon and DoRA files"):
        resize_lora(path, str(tmp_path / "out.safetensors"), rank=2)


def test_rank_above_the_files_rank_and_an_existing_output_are_refused(locon_files, tmp_path):
    source = locon_files["files"][0]
    with pytest.raises(EriDiffusionError, match="rank 9 is out of range; .* from 1 to 8"):
        resize_lora(source, str(tmp_path / "a.safetensors"), rank=9)
    with pytest.raises(EriDiffusionError, match="energy 1.5 is out of range"):
        resize_lora(source, str(tmp_path / "a.safetensors"), energy=1.5)
    existing = tmp_path / "exists.safetensors"
    existing.write_bytes(b"keep")
    with pytest.raises(EriDiffusionError, match="already exists; .* --force"):
        resize_lora(source, str(existing), rank=2)
    assert existing.read_bytes() == b"keep"
    resize_lora(source, str(existing), rank=2, overwrite=True)
    assert safetensors.torch.load_file(str(existing))  # replaced by the resized LoRA


def test_missing_file_and_a_file_that_is_no_lora_are_refused(tmp_path):
    with pytest.raises(EriDiffusionError, match="missing.safetensors does not exist"):
        resize_lora(str(tmp_path / "missing.safetensors"), str(tmp_path / "o.safetensors"), rank=2)
    weights = str(tmp_path / "model.safetensors")
    safetensors.torch.save_file({"input_blocks.0.0.weight": torch.ones(2, 2)}, weights)
    with pytest.raises(EriDiffusionError, match="is not a LoRA: none of its 1 keys"):
        resize_lora(weights, str(tmp_path / "o.safetensors"), rank=2)
