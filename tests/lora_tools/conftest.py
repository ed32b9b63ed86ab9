"""Short training runs of the families the convert tests cover, one per (family, algorithm) for the session."""

import os

import pytest
import torch

from devkit.stock_comfyui import ProbeInput
from devkit.tiny_models import TINY_FAMILIES, build_tiny

CONVERT_FAMILIES = ("sdxl", "flux_dev", "flux2", "z_image", "qwen_image", "wan21_t2v")
_RUNS = {}


def _train(arch, algorithm, request, folder):
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.data.training_data import build_training_data
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.trainer import train_lora

    family = TINY_FAMILIES[arch]
    dataset = request.getfixturevalue("dog_clips" if family.video_frames else "dog_dataset")
    model, clip, vae = build_tiny(arch, seed=0)
    with torch.inference_mode():
        data = build_training_data(dataset, vae, clip, 64, f"{folder}/cache")
    data.samples = data.samples[:2]
    # rank 8 at alpha 4: a scale of 0.5, so a convention that drops or misreads alphas shows
    adapter = AdapterSpec(algorithm=algorithm, rank=8, alpha=4.0, targets="all-linear")
    config = TrainConfig(
        gradient_checkpointing=False,
        steps=4,
        learning_rate=2e-2,
        dtype="fp32",
        seed=0,
        log_every=4,
        adapter=adapter,
        run_name=f"convert_{arch}_{algorithm}",
    )
    with torch.inference_mode(False):
        result = train_lora(model, data, config, f"{folder}/run")
    path = result.lora.save(os.path.join(folder, f"{arch}_{algorithm}.safetensors"), dtype="fp32")
    return {"arch": arch, "model": model, "probe": ProbeInput.of(model, data), "path": path}


@pytest.fixture
def family_lora(request, tmp_path_factory):
    """(arch, algorithm) -> a 4-step run's LoRA of that tiny family, saved in fp32 ComfyUI keys:
    {"arch", "model", "probe", "path"}."""

    def get(arch, algorithm="lora"):
        if (arch, algorithm) not in _RUNS:
            folder = str(tmp_path_factory.mktemp(f"convert_{arch}_{algorithm}"))
            _RUNS[arch, algorithm] = _train(arch, algorithm, request, folder)
        return _RUNS[arch, algorithm]

    return get
