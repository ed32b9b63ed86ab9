"""A base loaded from an fp8_scaled (mixed-quantized) checkpoint, as ComfyUI 0.28 loads it: its linear
layers are ComfyUI's MixedPrecisionOps layers, which adapters do not train yet (issue 43). The run is
refused before anything trains, naming the layers' class and the fix, and the MODEL is left as it came."""

import os

import pytest
import torch

from devkit.quantized_bases import LOADS_PER_LAYER_QUANTIZATION
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora

pytestmark = pytest.mark.skipif(
    not LOADS_PER_LAYER_QUANTIZATION, reason="this ComfyUI loads no per-layer quantized checkpoints"
)


@pytest.mark.parametrize("targets", ["all-linear", "attention"])
def test_a_run_on_an_fp8_scaled_base_is_refused_before_training_naming_the_fix(dog_dataset, tmp_path, targets):
    from comfy_kitchen.tensor.base import QuantizedTensor

    from devkit.quantized_bases import tiny_sd15_fp8_scaled

    model, clip, vae = tiny_sd15_fp8_scaled(seed=0)
    weights = {n: p for n, p in model.model.diffusion_model.named_parameters()}
    quantized = [n for n, p in weights.items() if isinstance(p, QuantizedTensor)]
    assert len(quantized) > 50
    before = {n: p.detach().clone() for n, p in weights.items() if n not in quantized}
    with torch.inference_mode():
        data = build_training_data(dog_dataset, vae, clip, 64, str(tmp_path / "cache"))
    data.samples = data.samples[:2]
    config = TrainConfig(
        steps=2,
        learning_rate=1e-3,
        dtype="fp32",
        gradient_checkpointing=False,
        run_name="fp8_scaled",
        adapter=AdapterSpec(rank=4, alpha=4.0, targets=targets),
    )
    with pytest.raises(EriDiffusionError) as refused, torch.inference_mode(False):
        train_lora(model, data, config, str(tmp_path / "run"))
    message = str(refused.value)
    assert "quantized layers" in message and "MixedPrecisionOps" in message and "bf16" in message, message
    assert "try 'all-linear'" not in message
    assert not os.path.exists(tmp_path / "run")
    assert all(
        isinstance(p, QuantizedTensor) for n, p in model.model.diffusion_model.named_parameters() if n in quantized
    )
    assert all(torch.equal(before[n], p) for n, p in model.model.diffusion_model.named_parameters() if n in before)


class TinyFp8ScaledModel:
    """A loader node for the graph: tiny_sd15_fp8_scaled's (MODEL, CLIP, VAE), as UNETLoader would hand
    over an fp8_scaled checkpoint (whose tiny config ComfyUI's detection cannot read from a file)."""

    RETURN_TYPES = ("MODEL", "CLIP", "VAE")
    FUNCTION = "load"
    CATEGORY = "tests"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    def load(self):
        from devkit.quantized_bases import tiny_sd15_fp8_scaled

        return tiny_sd15_fp8_scaled(seed=0)


def test_the_lora_trainer_node_refuses_an_fp8_scaled_model_before_its_run_folder(comfy_dirs, monkeypatch):
    import nodes

    from devkit.headless import CONFIGS, graph_prompt
    from devkit.workflow import execution_error, load_extension, run_prompt
    from eridiffusion.headless.run_config import load_run_config

    load_extension()
    monkeypatch.setitem(nodes.NODE_CLASS_MAPPINGS, "Tests_TinyFp8ScaledModel", TinyFp8ScaledModel)
    prompt = graph_prompt(load_run_config(os.path.join(CONFIGS, "tiny_demo.yaml")))
    prompt["1"] = {"class_type": "Tests_TinyFp8ScaledModel", "inputs": {}}
    prompt["3"]["inputs"]["resolution"] = 64
    executor, _ = run_prompt(prompt)
    error = execution_error(executor)
    assert not executor.success and error.startswith("EriDiffusion_LoRATrainer"), error
    assert "quantized layers" in error and "MixedPrecisionOps" in error, error
    assert not os.path.exists(os.path.join(comfy_dirs["output"], "sks_dog"))
