"""Inspecting a trained LoCon: family, algorithm, rank/alpha per block, metadata by writer, and the keys
a model would not load (from the MODEL, or from a weights file's header alone)."""

import safetensors.torch

from eridiffusion.comfy_compat import patched_diffusion_weights
from eridiffusion.lora_tools.inspection import inspect_lora, model_key_map, weights_file_key_map


def test_report_names_family_algorithm_ranks_alphas_and_metadata(locon_files):
    report = inspect_lora(locon_files["files"][0])
    assert (report.family, report.family_source) == ("SD15", "metadata architecture")
    assert list(report.algorithms) == ["lora"]
    blocks = report.blocks
    assert {"input_blocks.1", "middle_block.1", "output_blocks.8", "time_embed.0"} <= set(blocks)
    assert all(set(block.ranks) == {8} for block in blocks.values())
    # linear layers at alpha 8, the conv layers (conv_alpha 4) beside them
    assert set(blocks["input_blocks.1"].alphas) == {8.0, 4.0}
    assert report.metadata["eridiffusion"]["eridiffusion_rank"] == "8"
    assert report.metadata["kohya"]["ss_network_dim"] == "8"
    assert report.keys == sum(block.layers for block in blocks.values()) * 3
    assert any(line.startswith("  input_blocks.1 ") for line in report.lines())


def test_keys_a_model_would_not_load_are_listed(locon_files, tmp_path):
    model, source = locon_files["model"], locon_files["files"][0]
    tensors = safetensors.torch.load_file(source)
    tensors["lora_unet_not_a_layer.lora_up.weight"] = tensors["lora_unet_time_embed_0.lora_up.weight"].clone()
    tensors["lora_unet_not_a_layer.lora_down.weight"] = tensors["lora_unet_time_embed_0.lora_down.weight"].clone()
    path = str(tmp_path / "extra.safetensors")
    safetensors.torch.save_file(tensors, path)
    expected = ["lora_unet_not_a_layer.lora_down.weight", "lora_unet_not_a_layer.lora_up.weight"]
    assert inspect_lora(source, model_key_map(model)).not_loaded == []
    assert inspect_lora(path, model_key_map(model)).not_loaded == expected
    weights = str(tmp_path / "unet.safetensors")  # the header alone is read
    safetensors.torch.save_file(patched_diffusion_weights(model), weights)
    assert inspect_lora(path, weights_file_key_map(weights)).not_loaded == expected
