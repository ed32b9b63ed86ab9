"""Every verb takes every trainer's LoRA file (incoming.py): given the model, resize, merge and merge into a
checkpoint convert each file to ComfyUI's keys on the way in, and stock ComfyUI gives with the result what
it gives with the original LoRA; inspect reports each file's true rank and alpha; without the model, files
whose layers are named apart are refused naming the model input. SD1.5, SDXL and Flux tiny stacks, each
LoRA written as each trainer writes it (peft's own files for PEFT and diffusers)."""

import pytest
import safetensors.torch
import torch

from devkit.foreign_loras import convention, foreign_file, write_convention
from devkit.stock_comfyui import load_with_stock_comfyui, relative_error
from devkit.tiny_models import family_params
from eridiffusion.errors import EriDiffusionError
from eridiffusion.lora_tools.inspection import inspect_lora
from eridiffusion.lora_tools.merge import merge_loras
from eridiffusion.lora_tools.resize import resize_lora

FORMATS = ("kohya", "musubi-tuner", "ai-toolkit", "onetrainer", "simpletuner-lycoris", "peft", "diffusers")
VERB_FAMILIES = ("sd15", "sdxl", "flux_dev")
FP32_TOLERANCE = 1e-5


def _stock_output(lora, path, caplog):
    patched, unmatched = load_with_stock_comfyui(lora["model"], path, 1.0, caplog)
    assert unmatched == [], unmatched[:3]
    return lora["probe"].output(patched)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("arch", family_params(VERB_FAMILIES))
def test_resize_and_merge_take_any_trainers_file_converted_for_the_model(arch, fmt, family_lora, tmp_path, caplog):
    if fmt == "musubi-tuner" and arch != "flux_dev":
        pytest.skip("musubi-tuner trains no SD1.5 or SDXL")
    lora = family_lora(arch)
    model = lora["model"].model
    reference = _stock_output(lora, lora["path"], caplog)
    foreign = foreign_file(lora, fmt, tmp_path)

    # inspect, without the model: the rank and alpha the trainer wrote (ai-toolkit's transformer files fold
    # the scale into lora_B and hold no alpha: alpha = rank)
    report = inspect_lora(foreign)
    scale_in_b = fmt not in ("peft", "diffusers") and convention(fmt, arch).tensors == "peft"
    assert {r for b in report.blocks.values() for r in b.ranks} == {8}
    assert {a for b in report.blocks.values() for a in b.alphas} == ({8.0} if scale_in_b else {4.0})

    resized = resize_lora(foreign, str(tmp_path / "r8.safetensors"), rank=8, model=model)  # rank 8: nothing cut
    assert any(f"converted to ComfyUI's keys for {type(model).__name__}" in line for line in resized.lines())
    assert relative_error(_stock_output(lora, resized.path, caplog), reference) < FP32_TOLERANCE

    merged = merge_loras([(foreign, 0.5), (lora["path"], 0.5)], str(tmp_path / "m.safetensors"), model=model)
    assert relative_error(_stock_output(lora, merged.path, caplog), reference) < FP32_TOLERANCE


@pytest.mark.parametrize("arch", family_params(VERB_FAMILIES))
def test_merge_into_a_checkpoint_converts_a_peft_file_on_the_way_in(arch, family_lora, tmp_path, caplog):
    """PEFT's save_pretrained file (base_model.model. names, which stock ComfyUI loads none of, alphas in its
    adapter_config.json) merged into a checkpoint of the model gives what the original LoRA gives."""
    from devkit.tiny_models import build_tiny
    from eridiffusion.lora_tools.checkpoint import merge_into_checkpoint

    lora = family_lora(arch)
    reference = _stock_output(lora, lora["path"], caplog)
    foreign = foreign_file(lora, "peft", tmp_path)
    result = merge_into_checkpoint(lora["model"], None, None, [(foreign, 1.0, 1.0)], str(tmp_path / "c.safetensors"))
    assert result.lines()[1].endswith(", converted to ComfyUI's keys on the way in")
    # the checkpoint's diffusion model in another init of the tiny stack (ComfyUI's detection cannot read
    # back the tiny stacks' narrow heads from a file)
    saved = safetensors.torch.load_file(result.path)
    prefix = "model.diffusion_model."
    loaded = build_tiny(arch, seed=1)[0]
    loaded.model.diffusion_model.load_state_dict(
        {k[len(prefix) :]: v for k, v in saved.items() if k.startswith(prefix)}
    )
    assert relative_error(lora["probe"].output(loaded), reference) < FP32_TOLERANCE


@pytest.mark.parametrize("fmt", ["ai-toolkit", "diffusers"])
def test_files_named_apart_are_refused_without_the_model_naming_it(fmt, family_lora, tmp_path):
    lora = family_lora("flux_dev")
    foreign = foreign_file(lora, fmt, tmp_path)
    output = tmp_path / "m.safetensors"
    with pytest.raises(EriDiffusionError) as refused:
        merge_loras([(lora["path"], 1.0), (foreign, 1.0)], str(output))
    assert "Give the model the LoRAs are for (--model on the command line, the node's MODEL input)" in str(
        refused.value
    )
    assert not output.exists()


def test_the_cli_takes_a_diffusers_folder_as_the_model_and_converts_as_for_the_loaded_model(tmp_path, lora_cli):
    """A Flux saved as a sharded diffusers pipeline folder (its q, k and v apart) as --model: resize and merge
    convert an OneTrainer file for it to the same tensors as for the model's ComfyUI-named file and for the
    loaded model itself; without --model the files are refused."""
    from devkit.checkpoint_models import random_lora
    from devkit.diffusers_files import detectable_flux, flux_in_diffusers_names, save_diffusers_pipeline_folder

    patcher = detectable_flux()
    if patcher is None:
        pytest.skip("this ComfyUI's detection reads every Flux file as 24 heads of 128: none small reads back")
    model = patcher.model
    comfy_file = str(tmp_path / "flux.safetensors")
    safetensors.torch.save_file({k: v.contiguous() for k, v in model.diffusion_model.state_dict().items()}, comfy_file)
    folder = save_diffusers_pipeline_folder(flux_in_diffusers_names(model), str(tmp_path / "flux_diffusers"))
    ours = random_lora(patcher, str(tmp_path / "ours.safetensors"))
    foreign = write_convention(model, ours, "onetrainer", "flux_dev", str(tmp_path / "onetrainer.safetensors"))
    loaded = resize_lora(foreign, str(tmp_path / "loaded.safetensors"), rank=2, model=model).path
    for name, given in (("comfy", comfy_file), ("diffusers", folder)):
        output = tmp_path / f"{name}.safetensors"
        status, out, err = lora_cli("resize", foreign, "--model", given, "--rank", 2, "-o", output)
        assert status == 0, err
        assert "converted to ComfyUI's keys for Flux" in out
        expected, written = safetensors.torch.load_file(loaded), safetensors.torch.load_file(output)
        assert written.keys() == expected.keys() and all(torch.equal(written[k], expected[k]) for k in expected)
    status, out, err = lora_cli(
        "merge", foreign, ours, "--model", folder, "--rank", 2, "-o", tmp_path / "m.safetensors"
    )
    assert status == 0 and "rank 2 merge" in out, err
    status, _, err = lora_cli("merge", foreign, ours, "-o", tmp_path / "refused.safetensors")
    assert status == 2 and "Give the model the LoRAs are for" in err
    assert not (tmp_path / "refused.safetensors").exists()


def test_a_diffusers_sdxl_file_with_text_encoders_converts_each_component_at_its_own_alpha(
    family_lora, tmp_path, caplog
):
    """diffusers' SDXL LoRA with unet, text_encoder and text_encoder_2 layers, each component's LoraConfig in
    the metadata (the UNet's alpha 4, the text encoders' 16): inspect reports both alphas; converted for the
    model, its UNet gives the original LoRA's output and its text encoders give stock ComfyUI's CLIP output
    of the same LoRAs in kohya's names at alpha 16."""
    import comfy.sd

    from devkit.foreign_loras import write_diffusers_with_text_encoders
    from devkit.tiny_models import build_tiny
    from eridiffusion.lora_tools.convert import convert_lora

    lora = family_lora("sdxl")
    clip = build_tiny("sdxl", seed=0)[1]
    source, kohya = write_diffusers_with_text_encoders(
        lora["model"].model, clip, lora["path"], str(tmp_path / "pytorch_lora_weights.safetensors"), text_alpha=16
    )
    assert {a for b in inspect_lora(source).blocks.values() for a in b.alphas} == {4.0, 16.0}
    converted = convert_lora(source, str(tmp_path / "converted.safetensors"), lora["model"].model).path
    tokens = clip.tokenize("a photo of a dog")
    outputs, models = [], []
    caplog.clear()
    for tensors in (safetensors.torch.load_file(converted), kohya):
        model, patched = comfy.sd.load_lora_for_models(lora["model"], clip, tensors, 1.0, 1.0)
        outputs.append(patched.encode_from_tokens(tokens))
        models.append(model)
    assert "lora key not loaded" not in caplog.text
    assert relative_error(outputs[0], outputs[1]) < FP32_TOLERANCE
    assert relative_error(clip.encode_from_tokens(tokens), outputs[1]) > 1e-3  # the text encoders' LoRAs count
    reference = _stock_output(lora, lora["path"], caplog)
    assert relative_error(lora["probe"].output(models[0]), reference) < FP32_TOLERANCE
