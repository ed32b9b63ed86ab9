"""What the command line saves after a run: a two-expert run (model.low_noise_model) writes one LoRA per
expert, <filename_prefix>_high_noise and _low_noise, each the expert's own adapter."""

import contextlib
import copy
import os

import safetensors.torch
import torch

from devkit.headless import write_yaml
from devkit.short_runs import family_run
from devkit.tiny_models import TINY_FAMILIES, build_tiny
from eridiffusion.headless.run import check_save_target, save_outputs, use_output_folder
from eridiffusion.headless.run_config import load_run_config
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.run.trainer import train_lora

CONFIG = """
model: {diffusion_model: high.safetensors, low_noise_model: low.safetensors, text_encoders: [t5.safetensors],
        clip_type: wan, vae: vae.safetensors}
dataset: {folder: clips}
save: {filename_prefix: wan22/sks}
"""


def test_a_two_expert_run_saves_a_high_and_a_low_noise_lora_each_of_its_expert(dog_clips, tmp_path):
    config = load_run_config(write_yaml(tmp_path / "experts.yaml", CONFIG))
    with headless_output(str(tmp_path / "out")):
        _save_two_experts(config, dog_clips, tmp_path)


@contextlib.contextmanager
def headless_output(folder):
    """The command line's output folder (and its loras/) for the block; ComfyUI's own after it."""
    import folder_paths

    output, loras = folder_paths.get_output_directory(), copy.deepcopy(folder_paths.folder_names_and_paths["loras"])
    use_output_folder(folder)
    try:
        yield
    finally:
        folder_paths.set_output_directory(output)
        folder_paths.folder_names_and_paths["loras"] = loras


def _save_two_experts(config, dog_clips, tmp_path):
    high, clip, vae = build_tiny("wan21_t2v", seed=0)
    with torch.inference_mode():
        data = build_training_data(dog_clips, vae, clip, TINY_FAMILIES["wan21_t2v"].resolution, str(tmp_path / "c"))
    with torch.inference_mode(False):
        result = train_lora(
            high, data, family_run("sks", 4), str(tmp_path / "run"), low_noise_model=build_tiny("wan21_t2v", seed=1)[0]
        )
    check_save_target(config)  # (nothing saved yet)
    path = save_outputs(config, result)
    loras = os.path.join(str(tmp_path / "out"), "loras", "wan22")
    assert path == os.path.join(loras, "sks_high_noise.safetensors")
    assert sorted(os.listdir(loras)) == ["sks_high_noise.safetensors", "sks_low_noise.safetensors"]
    for name, expert in (("high", result), ("low", result.low_noise)):
        saved = safetensors.torch.load_file(os.path.join(loras, f"sks_{name}_noise.safetensors"))
        assert all(torch.equal(saved[key], tensor.to(saved[key].dtype)) for key, tensor in expert.lora.tensors.items())
