"""Diagnostic (issue 44): on this machine, where the fp8_scaled tiny SD1.5's trained model and stock
ComfyUI's bypass loading of its LoRA part. Prints JSON: relative errors between the stock fp8 model,
our trained patcher at multiplier 0 and 1, and stock bypass loading of the saved file."""

import dataclasses
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from eridiffusion.runtime import start_host_in_temp_dir  # noqa: E402

start_host_in_temp_dir("eridiffusion-probe-")

import comfy.model_management as mm  # noqa: E402
import comfy.sd  # noqa: E402
import comfy.utils  # noqa: E402

from devkit import paths  # noqa: E402
from devkit.quantized_bases import tiny_sd15_fp8_scaled  # noqa: E402
from devkit.stock_comfyui import ProbeInput, relative_error  # noqa: E402
from eridiffusion.training.adapters import AdapterSpec  # noqa: E402
from eridiffusion.training.data.dataset import load_dataset  # noqa: E402
from eridiffusion.training.data.training_data import build_training_data  # noqa: E402
from eridiffusion.training.run.config import TrainConfig  # noqa: E402
from eridiffusion.training.run.trainer import train_lora  # noqa: E402


def _layer_io(layer, probe, patcher):
    """(input, output) of `layer` in `patcher`'s forward on the probe."""
    seen = {}
    handle = layer.register_forward_hook(lambda m, args, out: seen.update(io=(args[0].clone(), out.clone())))
    try:
        probe.output(patcher)
    finally:
        handle.remove()
    return seen["io"]


def main():
    tmp = tempfile.mkdtemp()
    model, clip, vae = tiny_sd15_fp8_scaled(seed=0)
    dataset = load_dataset(os.path.join(paths.shared_datasets(), "dreambooth_dog"))
    with torch.inference_mode():
        data = build_training_data(dataset, vae, clip, 64, os.path.join(tmp, "cache"))
    data = dataclasses.replace(data, samples=data.samples[:2], validation=None)
    probe = ProbeInput.of(model, data)
    report = {"device": str(model.load_device), "fp8_compute": bool(mm.supports_fp8_compute(model.load_device))}
    report["manual_cast_dtype"] = str(model.model.manual_cast_dtype)
    stock = probe.output(model)
    report["stock_twice"] = relative_error(probe.output(model), stock)
    config = TrainConfig(
        steps=30,
        learning_rate=3e-3,
        dtype="fp32",
        gradient_checkpointing=False,
        run_name="probe",
        adapter=AdapterSpec(algorithm="lora", rank=4, alpha=4.0, targets="all-linear"),
    )
    with torch.inference_mode(False):
        result = train_lora(model, data, config, os.path.join(tmp, "run"))
    adapters = result.trained.adapters
    adapters.set_multiplier(0.0)
    report["ours_at_0_vs_stock"] = relative_error(probe.output(result.patcher), stock)
    adapters.set_multiplier(1.0)
    trained = probe.output(result.patcher)
    report["ours_trained_vs_stock"] = relative_error(trained, stock)
    path = result.lora.save(os.path.join(tmp, "lora.safetensors"), dtype="fp32")
    on_fp8, _ = comfy.sd.load_bypass_lora_for_models(model, None, comfy.utils.load_torch_file(path), 1.0, 0.0)
    bypass = probe.output(on_fp8)
    report["stock_bypass_vs_ours"] = relative_error(bypass, trained)
    report["stock_bypass_at_0_vs_stock"] = relative_error(
        probe.output(comfy.sd.load_bypass_lora_for_models(model, None, comfy.utils.load_torch_file(path), 0.0, 0.0)[0]),
        stock,
    )
    # one quantized layer: each model's adapter term there, against the exact one computed in fp32 from
    # the saved file on the input that layer saw
    name, layer = next(
        (n, m) for n, m in model.model.diffusion_model.named_modules() if getattr(m, "layout_type", None)
    )
    tensors = comfy.utils.load_torch_file(path)
    key = next(k for k in tensors if k.endswith("lora_down.weight") and name.replace(".", "_") in k)
    down, up = tensors[key].float(), tensors[key.replace("lora_down", "lora_up")].float()
    alpha = tensors.get(key.replace("lora_down.weight", "alpha"))
    scale = (float(alpha) if alpha is not None else down.shape[0]) / down.shape[0]
    for label, patcher in (("ours", result.patcher), ("stock_bypass", on_fp8)):
        x, out = _layer_io(layer, probe, patcher)
        with torch.inference_mode():
            base = type(layer).forward(layer, x)
            hidden = torch.nn.functional.linear(x.float(), down.to(x.device))
            exact = torch.nn.functional.linear(hidden, up.to(x.device)) * scale
        report[f"{label}_term_vs_exact"] = relative_error((out - base).float().cpu(), exact.cpu())
        report[f"{label}_dtypes"] = [str(x.dtype), str(out.dtype), str(base.dtype)]
    report["layer"] = {
        "class": type(layer).__qualname__,
        "layout": str(layer.layout_type),
        "full_precision_mm": bool(layer._full_precision_mm),
        "weight": type(layer.weight).__name__,
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
