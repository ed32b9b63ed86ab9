"""A LoRA merged into a checkpoint through ComfyUI's own save: CheckpointLoaderSimple loads it back and it
reproduces the base model with the LoRA applied; a LoRA with keys the loader would skip is refused."""

import os

import pytest
import safetensors.torch
import torch

from devkit.checkpoint_models import loadable_sd15, random_lora, unet_output
from devkit.stock_comfyui import relative_error
from eridiffusion.errors import EriDiffusionError
from eridiffusion.lora_tools.checkpoint import merge_into_checkpoint


def test_a_merged_checkpoint_loads_in_checkpointloadersimple_and_reproduces_base_plus_lora(tmp_path):
    import comfy.sd
    import folder_paths
    import nodes  # ComfyUI's own

    model, vae = loadable_sd15()
    lora = random_lora(model, str(tmp_path / "lora.safetensors"))
    with_lora, _ = comfy.sd.load_lora_for_models(model, None, comfy.utils.load_torch_file(lora), 0.8, 0)
    reference, base = unet_output(with_lora), unet_output(model)
    output = os.path.join(folder_paths.get_folder_paths("checkpoints")[0], "eridiffusion_merged_test.safetensors")
    result = merge_into_checkpoint(model, None, vae, [(lora, 0.8, 1.0)], output, overwrite=True)
    loaded = nodes.CheckpointLoaderSimple().load_checkpoint("eridiffusion_merged_test.safetensors")[0]
    assert relative_error(unet_output(loaded), reference) < 1e-5
    assert relative_error(base, reference) > 1e-2  # the LoRA changes the output
    assert relative_error(unet_output(model), base) == 0  # the input MODEL is unchanged
    assert result.lines()[1] == "  lora.safetensors: model 0.8, clip 1, 141 keys"


@pytest.mark.parametrize(
    "extra",
    [
        ("lora_unet_not_a_layer.lora_up.weight", "lora_unet_not_a_layer.lora_down.weight"),  # kohya's names
        ("transformer.not_a_layer.lora_A.weight", "transformer.not_a_layer.lora_B.weight"),  # PEFT's
    ],
    ids=["kohya", "peft"],
)
def test_a_lora_with_a_layer_the_model_lacks_is_refused_and_nothing_written(tmp_path, extra):
    """A key the loader would skip sends the file through convert on the way in, which names the layer no
    weight of the model has."""
    model, vae = loadable_sd15()
    lora = random_lora(model, str(tmp_path / "lora.safetensors"))
    tensors = safetensors.torch.load_file(lora)
    tensors.update({key: torch.zeros(4, 4) for key in extra})
    safetensors.torch.save_file(tensors, lora)
    with pytest.raises(EriDiffusionError, match=r"layers name no weight of this BaseModel model .*not_a_layer"):
        merge_into_checkpoint(model, None, vae, [(lora, 1.0, 1.0)], str(tmp_path / "merged.safetensors"))
    assert not (tmp_path / "merged.safetensors").exists()


def test_a_peft_lora_is_merged_at_the_alphas_of_its_config(tmp_path):
    """A diffusers/PEFT file (names ComfyUI's loader does not map for a UNet, alphas in its LoraConfig, which
    that loader does not read) is converted on the way in: the checkpoint is the one its ComfyUI-keyed twin
    gives."""
    from eridiffusion.lora_tools.convert import convert_lora

    model, vae = loadable_sd15()
    lora = random_lora(model, str(tmp_path / "lora.safetensors"))
    assert {float(v) for k, v in safetensors.torch.load_file(lora).items() if k.endswith(".alpha")} != {4.0}
    peft = convert_lora(lora, str(tmp_path / "peft.safetensors"), model.model, to="peft").path
    assert not any(k.endswith(".alpha") for k in safetensors.torch.load_file(peft))
    outputs = []
    for i, path in enumerate((lora, peft)):
        merged = merge_into_checkpoint(model, None, vae, [(path, 0.8, 1.0)], str(tmp_path / f"m{i}.safetensors"))
        import comfy.sd

        loaded = comfy.sd.load_checkpoint_guess_config(merged.path, output_vae=False, output_clip=False)[0]
        outputs.append(unet_output(loaded))
    assert relative_error(outputs[1], outputs[0]) < 1e-5
