"""`lora convert`: our tiny LoRAs of six families written as other trainers write theirs (and by peft
itself) convert back to ComfyUI's keys with no key stock ComfyUI leaves unloaded and the same output; a
ComfyUI -> PEFT -> ComfyUI round trip gives the same tensors; what cannot convert is named."""

import pytest
import safetensors.torch
import torch

from devkit.foreign_loras import foreign_file, write_convention
from devkit.stock_comfyui import load_with_stock_comfyui, relative_error
from devkit.tiny_models import TINY_FAMILIES, build_tiny, family_params
from eridiffusion.errors import EriDiffusionError
from eridiffusion.lora_tools.convert import convert_lora

FORMATS = ("kohya", "musubi-tuner", "ai-toolkit", "onetrainer", "simpletuner-lycoris", "peft", "diffusers")
FP32_TOLERANCE = 1e-5
CONVERT_FAMILIES = ("sdxl", "flux_dev", "flux2", "z_image", "qwen_image", "wan21_t2v")


def _output_with(lora, path, caplog):
    patched, unmatched = load_with_stock_comfyui(lora["model"], path, 1.0, caplog)
    return lora["probe"].output(patched), unmatched


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("arch", family_params(CONVERT_FAMILIES))
def test_a_foreign_lora_converts_to_comfyui_keys_with_the_same_output(arch, fmt, family_lora, tmp_path, caplog):
    if fmt == "musubi-tuner" and arch == "sdxl":
        pytest.skip("musubi-tuner trains no SDXL")
    lora = family_lora(arch)
    reference, unmatched = _output_with(lora, lora["path"], caplog)
    assert unmatched == []
    assert relative_error(lora["probe"].output(lora["model"]), reference) > 1e-3  # the LoRA changes the output
    foreign = foreign_file(lora, fmt, tmp_path)
    result = convert_lora(foreign, str(tmp_path / "converted.safetensors"), lora["model"].model)
    output, unmatched = _output_with(lora, result.path, caplog)
    assert unmatched == []
    assert relative_error(output, reference) < FP32_TOLERANCE
    assert result.layers == len(safetensors.torch.load_file(result.path)) // 3


@pytest.mark.parametrize("arch", family_params(CONVERT_FAMILIES))
def test_comfyui_to_peft_and_back_gives_the_same_tensors(arch, family_lora, tmp_path):
    lora = family_lora(arch)
    model = lora["model"].model
    peft_file = convert_lora(lora["path"], str(tmp_path / "peft.safetensors"), model, to="peft").path
    back = convert_lora(peft_file, str(tmp_path / "back.safetensors"), model).path
    original, returned = safetensors.torch.load_file(lora["path"]), safetensors.torch.load_file(back)
    assert sorted(returned) == sorted(original)
    assert all(torch.equal(returned[key], original[key]) for key in original)
    assert any(key.endswith(".lora_A.weight") for key in safetensors.torch.load_file(peft_file))


def test_an_unknown_key_is_named_and_nothing_is_written(family_lora, tmp_path):
    lora = family_lora("qwen_image")
    tensors = safetensors.torch.load_file(lora["path"])
    tensors["transformer_blocks.0.attn.to_q.hypernetwork.weight"] = torch.zeros(2)
    bad = str(tmp_path / "bad.safetensors")
    safetensors.torch.save_file(tensors, bad)
    with pytest.raises(EriDiffusionError, match=r"1 of its \d+ keys are no LoRA tensor .*to_q\.hypernetwork\.weight"):
        convert_lora(bad, str(tmp_path / "out.safetensors"), lora["model"].model)
    assert not (tmp_path / "out.safetensors").exists()


def test_a_lora_of_another_model_names_the_layers_it_cannot_place(family_lora, tmp_path):
    flux, qwen = family_lora("flux_dev"), family_lora("qwen_image")
    with pytest.raises(
        EriDiffusionError,
        match=r"name no weight of this QwenImage model \(e\.g\. lora_unet_double_blocks_0_img_attn_proj",
    ):
        convert_lora(flux["path"], str(tmp_path / "out.safetensors"), qwen["model"].model)


@pytest.mark.parametrize(
    "arch, algorithm, fmt",
    [
        ("sdxl", "dora", "onetrainer"),
        ("wan21_t2v", "dora", "kohya"),
        ("sdxl", "lokr", "simpletuner-lycoris"),
        ("qwen_image", "lokr", "ai-toolkit"),
        ("wan21_t2v", "lokr", "onetrainer"),
        ("sdxl", "loha", "simpletuner-lycoris"),
    ],
)
def test_a_foreign_dora_lokr_or_loha_converts_with_the_same_output(arch, algorithm, fmt, family_lora, tmp_path, caplog):
    lora = family_lora(arch, algorithm)
    reference, unmatched = _output_with(lora, lora["path"], caplog)
    assert unmatched == []
    assert relative_error(lora["probe"].output(lora["model"]), reference) > 1e-3
    foreign = foreign_file(lora, fmt, tmp_path)
    result = convert_lora(foreign, str(tmp_path / "converted.safetensors"), lora["model"].model)
    output, unmatched = _output_with(lora, result.path, caplog)
    assert unmatched == []
    assert relative_error(output, reference) < FP32_TOLERANCE
    assert f"({algorithm})" in "\n".join(result.lines())


def test_a_lokr_of_one_part_of_a_fused_weight_is_refused_naming_it(family_lora, tmp_path):
    flux = family_lora("flux_dev")
    part = str(tmp_path / "lokr.safetensors")
    prefix = "lycoris_transformer_blocks_0_attn_to_q"
    safetensors.torch.save_file({f"{prefix}.lokr_w1": torch.ones(8, 8), f"{prefix}.lokr_w2": torch.ones(8, 8)}, part)
    with pytest.raises(
        EriDiffusionError,
        match=rf"layer {prefix} is a lokr of a part of diffusion_model\.double_blocks\.0\.img_attn\.qkv\.weight",
    ):
        convert_lora(part, str(tmp_path / "out.safetensors"), flux["model"].model)


def test_two_layers_of_one_weight_with_swapped_halves_are_refused_naming_both(family_lora, tmp_path):
    from eridiffusion.formats.layer_names import weight_shapes

    flux = family_lora("flux_dev")
    weight = "diffusion_model.final_layer.adaLN_modulation.1.weight"  # diffusers' norm_out.linear, halves swapped
    rows, columns = weight_shapes(flux["model"].model)[weight]
    twice = str(tmp_path / "twice.safetensors")
    tensors = {}
    for layer in ("norm_out.linear", "transformer.norm_out.linear"):  # one layer, spelled two ways
        tensors[f"{layer}.lora_A.weight"] = torch.ones(2, columns)
        tensors[f"{layer}.lora_B.weight"] = torch.ones(rows, 2)
    safetensors.torch.save_file(tensors, twice)
    with pytest.raises(
        EriDiffusionError,
        match=r"layers norm_out\.linear, transformer\.norm_out\.linear all change "
        r"diffusion_model\.final_layer\.adaLN_modulation\.1\.weight; keep one of them",
    ):
        convert_lora(twice, str(tmp_path / "out.safetensors"), flux["model"].model)
    assert not (tmp_path / "out.safetensors").exists()


@pytest.mark.parametrize("arch", family_params(["sdxl", "flux_dev", "wan21_t2v"]))
def test_peft_itself_reads_the_peft_file_as_the_same_weight_changes(arch, family_lora, tmp_path):
    from devkit.foreign_loras import peft_deltas
    from devkit.stock_comfyui import layer_deltas
    from eridiffusion.formats.layer_names import diffusers_layers
    from eridiffusion.formats.lora_file import loadable_weight_keys

    lora = family_lora(arch)
    model = lora["model"].model
    peft_file = convert_lora(lora["path"], str(tmp_path / "peft.safetensors"), model, to="peft").path
    theirs = peft_deltas(peft_file)
    ours = {
        weight: layer_deltas(lora["path"])[prefix]
        for weight, prefix in loadable_weight_keys(model).items()
        if prefix in layer_deltas(lora["path"])
    }
    targets = diffusers_layers(model)
    gaps = []
    for name, delta in theirs.items():
        target = targets.get(name)
        weight = target.weight if target else f"diffusion_model.{name}.weight"
        expected = ours[weight]
        if target is not None and target.rows is not None:
            expected = expected[target.rows[0] : target.rows[0] + target.rows[1]]
        if target is not None and target.swap_halves:
            expected = torch.cat(expected.chunk(2)[::-1])
        gaps.append(((delta.flatten(1) - expected).norm() / expected.norm()).item())
    assert len(theirs) >= len(ours) and max(gaps) < 1e-6, max(gaps)


@pytest.mark.parametrize("arch", family_params(sorted(TINY_FAMILIES)))
def test_every_family_converts_back_from_diffusers_names_to_the_same_weight_changes(arch, tmp_path, caplog):
    from devkit.checkpoint_models import random_lora
    from devkit.stock_comfyui import layer_deltas

    model = build_tiny(arch, seed=0)[0]
    ours = random_lora(model, str(tmp_path / "ours.safetensors"))
    foreign = write_convention(model.model, ours, "ai-toolkit", arch, str(tmp_path / "ai_toolkit.safetensors"))
    result = convert_lora(foreign, str(tmp_path / "back.safetensors"), model.model)
    _, unmatched = load_with_stock_comfyui(model, result.path, 1.0, caplog)
    assert unmatched == []
    before, after = layer_deltas(ours), layer_deltas(result.path)
    assert sorted(after) == sorted(before) and len(before) > 0
    assert max(((after[k] - v).norm() / v.norm()).item() for k, v in before.items()) < 1e-6


@pytest.mark.parametrize("fmt", ["ai-toolkit", "onetrainer", "simpletuner-lycoris"])
def test_a_locons_convolutions_convert_with_the_same_output(fmt, locon_files, tmp_path, caplog):
    model, probe, source = locon_files["model"], locon_files["probe"], locon_files["files"][0]
    reference, unmatched = _output_with({"model": model, "probe": probe}, source, caplog)
    foreign = write_convention(model.model, source, fmt, "sd15", str(tmp_path / "foreign.safetensors"))
    result = convert_lora(foreign, str(tmp_path / "back.safetensors"), model.model)
    output, unmatched = _output_with({"model": model, "probe": probe}, result.path, caplog)
    assert unmatched == []
    assert relative_error(output, reference) < FP32_TOLERANCE
    convs = [
        k for k, v in safetensors.torch.load_file(result.path).items() if k.endswith("_down.weight") and v.dim() == 4
    ]
    assert len(convs) > 10


@pytest.mark.parametrize("arch", family_params(["qwen_image", "flux_dev"]))
def test_a_peft_dora_converts_to_its_whole_weight_change_as_peft_merges_it(arch, family_lora, tmp_path, caplog):
    from devkit.foreign_loras import write_peft_dora
    from eridiffusion.formats.layer_names import diffusers_layers

    lora = family_lora(arch)
    model = lora["model"].model
    dora_file, merged = write_peft_dora(model, lora["path"], str(tmp_path / "peft_dora"))
    result = convert_lora(str(tmp_path / "peft_dora"), str(tmp_path / "converted.safetensors"), model)
    _, unmatched = load_with_stock_comfyui(lora["model"], result.path, 1.0, caplog)
    assert unmatched == []
    converted, weights, targets = safetensors.torch.load_file(result.path), model.state_dict(), diffusers_layers(model)
    gaps = []
    for name, expected in merged.items():
        target = targets.get(name)
        weight = target.weight if target else f"diffusion_model.{name}.weight"
        prefix = next(k for k in converted if k.endswith(".diff") and _same_layer(k, weight))
        whole = weights[weight] + converted[prefix]
        rows = whole[target.rows[0] : target.rows[0] + target.rows[1]] if target and target.rows else whole
        rows = torch.cat(rows.chunk(2)[::-1]) if target and target.swap_halves else rows
        gaps.append(relative_error(rows, expected))
    assert max(gaps) < 1e-5 and len(result.whole) == len({k for k in converted if k.endswith(".diff")})
    assert f"{len(result.whole)} PEFT DoRA layers written as their whole weight change" in "\n".join(result.lines())


def _same_layer(key, weight):
    """Whether file key `key` (…​.diff) addresses ComfyUI weight `weight` (SaveLoRA's prefixes)."""
    native = weight[len("diffusion_model.") : -len(".weight")]
    return key[: -len(".diff")] in (f"diffusion_model.{native}", "lora_unet_" + native.replace(".", "_"))


def test_a_peft_dora_without_the_models_weights_is_refused_naming_what_is_needed(family_lora, tmp_path):
    from devkit.foreign_loras import write_peft_dora

    lora = family_lora("qwen_image")
    model = lora["model"].model
    write_peft_dora(model, lora["path"], str(tmp_path / "peft_dora"))
    with pytest.raises(
        EriDiffusionError, match=r"is a PEFT DoRA \(lora_magnitude_vector\), whose exact form .* are not at hand; give"
    ):
        convert_lora(str(tmp_path / "peft_dora"), str(tmp_path / "out.safetensors"), model, weights=lambda key: None)
    assert not (tmp_path / "out.safetensors").exists()
