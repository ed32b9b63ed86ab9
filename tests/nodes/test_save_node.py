"""SaveLoRA: where the file goes, what it refuses, and that ComfyUI's LoraLoader sees it at once."""

import os

import folder_paths
import pytest

from eridiffusion.errors import EriDiffusionError
from eridiffusion.formats.lora_file import TrainedLoRA
from eridiffusion.nodes.save_node import SaveLoRA


def small_lora():
    import torch

    return TrainedLoRA(
        {
            "lora_unet_x.lora_up.weight": torch.ones(4, 2),
            "lora_unet_x.lora_down.weight": torch.ones(2, 4),
            "lora_unet_x.alpha": torch.tensor(2.0),
        },
        {"architecture": "SD15"},
    )


def loras_files(loras_dir):
    return sorted(os.path.relpath(os.path.join(d, f), loras_dir) for d, _, files in os.walk(loras_dir) for f in files)


@pytest.mark.parametrize("prefix", ["../escape", "a/../../escape", "/tmp/absolute", "", "a//b"])
def test_prefix_leaving_models_loras_is_refused_and_nothing_is_written(prefix, comfy_dirs):
    before = loras_files(comfy_dirs["loras"])
    with pytest.raises(EriDiffusionError, match="filename_prefix"):
        SaveLoRA.execute(small_lora(), filename_prefix=prefix, dtype="fp16", overwrite=False)
    assert loras_files(comfy_dirs["loras"]) == before
    assert not os.path.exists("/tmp/absolute.safetensors")


def test_saved_file_appears_in_loraloader_list_without_restart(comfy_dirs):
    folder_paths.get_filename_list("loras")  # fill ComfyUI's cache first, as a running server has
    out = SaveLoRA.execute(small_lora(), filename_prefix="listed/my_lora", dtype="fp16", overwrite=False)
    assert out.result[0] == os.path.join(comfy_dirs["loras"], "listed", "my_lora.safetensors")
    assert os.path.join("listed", "my_lora.safetensors") in folder_paths.get_filename_list("loras")


def test_existing_name_is_never_overwritten_unless_told(comfy_dirs):
    first = SaveLoRA.execute(small_lora(), filename_prefix="keep/same", dtype="fp16", overwrite=False).result[0]
    second = SaveLoRA.execute(small_lora(), filename_prefix="keep/same", dtype="fp16", overwrite=False).result[0]
    assert os.path.basename(second) == "same_00001.safetensors" and os.path.exists(first)
    replaced = SaveLoRA.execute(small_lora(), filename_prefix="keep/same", dtype="bf16", overwrite=True).result[0]
    assert replaced == first
    assert loras_files(os.path.join(comfy_dirs["loras"], "keep")) == ["same.safetensors", "same_00001.safetensors"]


def test_saved_dtype_is_the_one_asked_for(comfy_dirs):
    import safetensors.torch

    path = SaveLoRA.execute(small_lora(), filename_prefix="dtype/bf16", dtype="bf16", overwrite=False).result[0]
    tensors = safetensors.torch.load_file(path)
    assert str(tensors["lora_unet_x.lora_up.weight"].dtype) == "torch.bfloat16"
    assert str(tensors["lora_unet_x.alpha"].dtype) == "torch.float32"
