"""Inspecting a trained LoCon: family, algorithm, rank/alpha per block, metadata by writer, and the keys
a model would not load (from the MODEL, or from a weights file's header alone)."""

import pytest
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


def test_a_musubi_z_image_file_is_read_and_its_unloaded_keys_are_the_ones_convert_places(family_lora, tmp_path):
    from devkit.foreign_loras import write_convention
    from eridiffusion.formats.layer_names import layer_table

    lora = family_lora("z_image")
    model = lora["model"].model
    musubi = write_convention(model, lora["path"], "musubi-tuner", "z_image", str(tmp_path / "musubi.safetensors"))
    report = inspect_lora(musubi, model_key_map(lora["model"]), layer_table(model))
    assert list(report.algorithms) == ["lora"] and {r for b in report.blocks.values() for r in b.ranks} == {8}
    # ComfyUI fuses Z-Image's q, k and v: musubi's to_q/to_k/to_v layers address no weight of it
    split_qkv = [k for k in safetensors.torch.load_file(musubi) if any(f"_attention_to_{p}." in k for p in "qkv")]
    assert len(split_qkv) == 3 * 3 * 6 and set(split_qkv) <= set(report.not_loaded)
    assert report.convertible == len(report.not_loaded)
    assert f"eridiffusion lora convert places {len(report.not_loaded)} of them" in "\n".join(report.lines())


def test_peft_and_diffusers_files_are_reported_with_the_alphas_of_their_configs(family_lora, tmp_path):
    """The family LoRA is rank 8 at alpha 4: PEFT's save_pretrained folder keeps lora_alpha in
    adapter_config.json, diffusers' file in its lora_adapter_metadata; a bare PEFT weights file has none
    (scale 1, as diffusers assumes), and the report says which."""
    import shutil

    from devkit.foreign_loras import write_peft

    lora = family_lora("qwen_image")
    folder = write_peft(lora["model"].model, lora["path"], "qwen_image", str(tmp_path / "peft"), "peft")
    diffusers = write_peft(lora["model"].model, lora["path"], "qwen_image", str(tmp_path / "diffusers"), "diffusers")
    bare = str(tmp_path / "bare.safetensors")
    shutil.copy(folder, bare)
    for path, alpha, source in (
        (str(tmp_path / "peft"), 4.0, "adapter_config.json"),
        (diffusers, 4.0, "metadata lora_adapter_metadata"),
        (bare, 8.0, "none in the file: scale 1 (alpha = rank), as diffusers assumes"),
    ):
        report = inspect_lora(path)
        assert list(report.algorithms) == ["lora"] and report.keys == 2 * sum(b.layers for b in report.blocks.values())
        assert {r for b in report.blocks.values() for r in b.ranks} == {8}
        assert {a for b in report.blocks.values() for a in b.alphas} == {alpha}, path
        layers = sum(b.layers for b in report.blocks.values())
        assert report.alpha_source.startswith(f"{layers} layers without one: ") and source in report.alpha_source
        assert f"alphas     {report.alpha_source}" in report.lines()
    assert report.path == bare and inspect_lora(str(tmp_path / "peft")).path.endswith("peft/adapter_model.safetensors")
    assert inspect_lora(lora["path"]).alpha_source == "every layer has its alpha"


@pytest.mark.parametrize(
    "arch, family",
    [
        ("sdxl", "SDXL"),
        ("flux_dev", "Flux"),
        ("flux2", "Flux.2"),
        ("z_image", "Z-Image / Lumina 2"),
        ("qwen_image", "Qwen-Image"),
        ("wan21_t2v", "Wan"),
    ],
)
@pytest.mark.parametrize("fmt", ["kohya", "ai-toolkit", "onetrainer"])
def test_the_family_of_a_file_without_metadata_is_told_by_its_key_names(arch, family, fmt, family_lora, tmp_path):
    from devkit.foreign_loras import write_convention

    lora = family_lora(arch)
    foreign = write_convention(lora["model"].model, lora["path"], fmt, arch, str(tmp_path / "foreign.safetensors"))
    report = inspect_lora(foreign)
    assert (report.family, report.family_source) == (family, "guessed from the key names")
