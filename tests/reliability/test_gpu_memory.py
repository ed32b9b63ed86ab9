"""A run hands back the GPU memory it took: five text-encoder runs with CUDA graphs in one process
(as a ComfyUI session trains again and again) leave the allocated memory where it was before them.
Before speed/cuda_graphs.release_graph_memory, each such run kept its graphs' memory (0.9, 0.8, 0.3
GiB more after the first three on an H100, tiny SDXL): bench/memory_returned.py."""

import gc
import os

import pytest
import torch

from devkit.paths import shared_datasets
from devkit.tiny_models import build_tiny
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.run.config import train_config_from
from eridiffusion.training.run.trainer import train_lora


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs and their memory are a GPU's")
def test_five_text_encoder_runs_with_cuda_graphs_give_their_memory_back(tmp_path):
    import comfy.model_management

    model, clip, vae = build_tiny("sdxl", seed=0)
    with torch.inference_mode():
        dataset = load_dataset(os.path.join(shared_datasets(), "dreambooth_dog"))
        data = build_training_data(dataset, vae, clip, 128, str(tmp_path / "cache"))

    def allocated():
        comfy.model_management.unload_all_models()
        gc.collect()
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()

    settings = {"steps": 4, "text_encoder_lr": 1e-4, "cuda_graphs": "on", "dtype": "bf16"}
    baseline, after = allocated(), []
    for run in range(5):
        config = train_config_from({**settings, "run_name": f"memory_{run}"})
        with torch.inference_mode(False):
            train_lora(model, data, config, str(tmp_path / f"run_{run}"), clip=clip)
        after.append((allocated() - baseline) / 2**20)
    assert max(after) < 64, after  # MiB
