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


def test_a_lora_with_keys_the_loader_skips_is_refused_and_nothing_written(tmp_path):
    model, vae = loadable_sd15()
    lora = random_lora(model, str(tmp_path / "lora.safetensors"))
    tensors = safetensors.torch.load_file(lora)
    tensors["transformer.not_a_layer.lora_A.weight"] = torch.zeros(4, 4)
    safetensors.torch.save_file(tensors, lora)
    with pytest.raises(EriDiffusionError, match=r"1 of its 142 keys would not load into this model .*not_a_layer"):
        merge_into_checkpoint(model, None, vae, [(lora, 1.0, 1.0)], str(tmp_path / "merged.safetensors"))
    assert not (tmp_path / "merged.safetensors").exists()
