"""A base loaded from an fp8_scaled (mixed-quantized) checkpoint, as ComfyUI 0.28 loads it: its linear
layers are ComfyUI's MixedPrecisionOps layers (those of the transformer blocks holding QuantizedTensors).
LoRA, LoHa and LoKr train on them through the layers' own forward (issue 43); the saved file loads with
no unmatched key on the bf16 model the fp8_scaled one was made from, and moves it as it moved the
fp8_scaled one; an algorithm that needs each layer's weight is refused before the run, naming the fix;
the MODEL is left as it came. Through ComfyUI's executor too."""

import dataclasses
import glob
import os

import comfy.sd
import comfy.utils
import pytest
import torch

from devkit.quantized_bases import LOADS_PER_LAYER_QUANTIZATION, products_in_full_precision
from devkit.stock_comfyui import ProbeInput, load_with_stock_comfyui, merged_tolerance, merging_in_fp32, relative_error
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora

pytestmark = pytest.mark.skipif(
    not LOADS_PER_LAYER_QUANTIZATION, reason="this ComfyUI loads no per-layer quantized checkpoints"
)


@pytest.fixture(scope="module")
def fp8_stack(datasets_dir, tmp_path_factory):
    """(the fp8_scaled tiny SD1.5, the same weights unquantized, 2 dog photos at 64 px)."""
    from devkit.quantized_bases import tiny_sd15_fp8_scaled
    from eridiffusion.tiny_models import tiny_sd15
    from eridiffusion.training.data.dataset import load_dataset
    from eridiffusion.training.data.training_data import build_training_data

    model, clip, vae = tiny_sd15_fp8_scaled(seed=0)
    reference, _, _ = tiny_sd15(seed=0)
    dataset = load_dataset(os.path.join(datasets_dir, "dreambooth_dog"))
    with torch.inference_mode():
        data = build_training_data(dataset, vae, clip, 64, str(tmp_path_factory.mktemp("fp8_scaled_cache")))
    return model, reference, dataclasses.replace(data, samples=data.samples[:2], validation=None)


def _config(algorithm, steps=30):
    return TrainConfig(
        steps=steps,
        learning_rate=3e-3,
        dtype="fp32",
        gradient_checkpointing=False,
        run_name="fp8_scaled",
        adapter=AdapterSpec(algorithm=algorithm, rank=4, alpha=4.0, targets="all-linear"),
    )


def _quantized_weights(model):
    from comfy_kitchen.tensor.base import QuantizedTensor

    return {n: p for n, p in model.model.diffusion_model.named_parameters() if isinstance(p, QuantizedTensor)}


@pytest.mark.parametrize("algorithm", ["lora", "lokr"])
def test_an_adapter_trained_on_an_fp8_scaled_base_moves_the_bf16_model_as_it_moved_the_fp8_one(
    fp8_stack, tmp_path, caplog, algorithm
):
    model, reference, data = fp8_stack
    quantized = _quantized_weights(model)
    assert len(quantized) > 50
    before = {n: (p._qdata.clone(), p._params.scale.clone()) for n, p in quantized.items()}
    probe = ProbeInput.of(model, data)
    with torch.inference_mode(False):
        result = train_lora(model, data, _config(algorithm), str(tmp_path / "run"))
    assert result.eval_loss_after < result.eval_loss_before
    trained_layers = {name.removeprefix("diffusion_model.") for name, _ in result.trained.adapters.items()}
    assert set(quantized) <= {f"{name}.weight" for name in trained_layers}  # every quantized layer trained
    path = result.lora.save(str(tmp_path / "lora.safetensors"), dtype="fp32")
    lora = comfy.utils.load_torch_file(path)
    on_fp8, _ = comfy.sd.load_bypass_lora_for_models(model, None, lora, 1.0, 0.0)
    on_reference, unmatched = load_with_stock_comfyui(reference, path, 1.0, caplog)
    assert unmatched == []
    # compared exactly: the merge in fp32 and the quantized layers' products on dequantized weights (on a GPU
    # ComfyUI would merge in fp16 and quantize each layer's input to fp8, both rounding noise)
    with merging_in_fp32(model.load_device), products_in_full_precision(model):
        base_output, trained_output = probe.output(model), probe.output(result.patcher)
        # stock ComfyUI's bypass loading (what it does for a LoRA on a quantized model) computes the trained model
        # (on a GPU both compute in the fp16 ComfyUI casts this model to, each rounding its own way)
        assert relative_error(probe.output(on_fp8), trained_output) < merged_tolerance(on_fp8)
        # the bf16 model takes the file whole, and it moves that model as training moved the fp8_scaled one,
        # as closely as the two bases agree (fp8's rounding changes each layer's input a little)
        taught = trained_output - base_output
        moved = probe.output(on_reference) - probe.output(reference)
        bases_apart = relative_error(probe.output(reference), base_output)
    assert relative_error(taught, base_output) > 0.1
    assert relative_error(moved, taught) < 0.02 + 4 * bases_apart
    for name, (qdata, scale) in before.items():  # the MODEL's quantized weights are as they came
        weight = _quantized_weights(model)[name]
        assert torch.equal(weight._qdata.cpu(), qdata.cpu()), name  # (on a GPU the weights are loaded there now)
        assert torch.equal(weight._params.scale.cpu(), scale.cpu()), name


@pytest.mark.parametrize("algorithm", ["dora", "oft", "glora"])
def test_an_algorithm_needing_the_layers_weight_is_refused_on_an_fp8_scaled_base(fp8_stack, tmp_path, algorithm):
    model, _, data = fp8_stack
    with pytest.raises(EriDiffusionError) as refused, torch.inference_mode(False):
        train_lora(model, data, _config(algorithm, steps=2), str(tmp_path / "run"))
    message = str(refused.value)
    assert "ComfyUI's mixed-precision layers" in message and "MixedPrecisionOps" in message, message
    assert f"{algorithm} needs each layer's weight" in message, message
    assert "lora, loha, lokr" in message and "bf16" in message, message
    assert not os.path.exists(tmp_path / "run")


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


def test_the_lora_trainer_node_trains_an_fp8_scaled_model_into_a_file_the_bf16_model_loads(
    comfy_dirs, monkeypatch, caplog
):
    import nodes

    from devkit.headless import CONFIGS, graph_prompt
    from devkit.workflow import execution_error, load_extension, run_prompt
    from eridiffusion.headless.run_config import load_run_config
    from eridiffusion.tiny_models import tiny_sd15

    load_extension()
    monkeypatch.setitem(nodes.NODE_CLASS_MAPPINGS, "Tests_TinyFp8ScaledModel", TinyFp8ScaledModel)
    config = load_run_config(os.path.join(CONFIGS, "tiny_demo.yaml"))
    config = dataclasses.replace(
        config, train={**config.train, "steps": 4, "run_name": "fp8_scaled_graph"}, sample=None
    )
    prompt = graph_prompt(config)
    prompt["1"] = {"class_type": "Tests_TinyFp8ScaledModel", "inputs": {}}
    prompt["3"]["inputs"]["resolution"] = 64
    executor, _ = run_prompt(prompt)
    assert executor.success, execution_error(executor)
    saved = glob.glob(os.path.join(comfy_dirs["output"], "**", "fp8_scaled_graph*.safetensors"), recursive=True)
    assert saved, os.listdir(comfy_dirs["output"])
    reference, _, _ = tiny_sd15(seed=0)
    _, unmatched = load_with_stock_comfyui(reference, max(saved, key=os.path.getmtime), 1.0, caplog)
    assert unmatched == []
