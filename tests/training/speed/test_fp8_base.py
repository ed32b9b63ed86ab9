"""Training on float8 base weights, as ComfyUI's UNETLoader gives them with weight_dtype
fp8_e4m3fn: the frozen weights stay fp8 (cast per layer by ComfyUI's manual-cast ops), the
adapters train in full precision, and the loss falls."""

import os

import torch

from devkit.stock_comfyui import load_with_stock_comfyui
from devkit.tiny_models import tiny_sd15
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora


def test_fp8_base_weights_train_and_stay_fp8(dog_dataset, tmp_path, caplog):
    model, clip, vae = tiny_sd15(seed=0, weight_dtype=torch.float8_e4m3fn)
    with torch.inference_mode():
        data = build_training_data(dog_dataset, vae, clip, 128, str(tmp_path / "cache"))
    data.samples = data.samples[:4]
    config = TrainConfig(
        gradient_checkpointing=False,
        steps=120,
        learning_rate=3e-3,
        dtype="fp32",
        log_every=40,
        run_name="fp8",
        adapter=AdapterSpec(rank=8, alpha=8.0, targets="all-linear"),
    )
    with torch.inference_mode(False):
        result = train_lora(model, data, config, str(tmp_path / "run"))
    assert result.eval_loss_after < 0.7 * result.eval_loss_before, (result.eval_loss_before, result.eval_loss_after)
    matrices = [p for p in model.model.diffusion_model.parameters() if p.dim() >= 2]
    assert {p.dtype for p in matrices} == {torch.float8_e4m3fn}
    assert all(p.dtype == torch.float32 for p in result.trained.adapters.parameters())
    path = result.lora.save(os.path.join(tmp_path, "fp8.safetensors"), dtype="fp16")
    _, unmatched = load_with_stock_comfyui(model, path, 1.0, caplog)
    assert unmatched == []
