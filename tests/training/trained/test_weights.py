"""A model's own weights trained (trained/weights.py) through the unchanged loop: the chosen layers
learn, the input MODEL computes as before, the saved diffusion model loads as ComfyUI's UNETLoader
loads it and gives the result MODEL's output, and a resumed run equals the uninterrupted one."""

import time

import comfy.model_detection
import comfy.model_management
import comfy.model_patcher
import comfy.utils
import pytest
import torch

from devkit.repeats import no_further_than_a_repeat
from devkit.stock_comfyui import ProbeInput, merged_tolerance, relative_error
from eridiffusion.errors import EriDiffusionError
from eridiffusion.formats.model_file import TRAINED_KIND
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.preflight import preflight
from eridiffusion.training.run.request import RunRequest
from eridiffusion.training.run.resume import load_resume_point
from eridiffusion.training.run.trainer import train_run
from eridiffusion.training.trained import TrainedWeights, trained_weights

# the output blocks' attention: 48 linear layers of the tiny SD1.5 (q, k, v, out of attn1 and attn2 in 6 blocks)
OUTPUT_ATTENTION = AdapterSpec(algorithm="full", targets="attention", include="output_blocks")


def config(**values):
    settings = dict(
        steps=6,
        learning_rate=1e-4,
        weight_decay=0.0,
        dtype="fp32",
        seed=5,
        log_every=1,
        save_every=3,
        gradient_checkpointing=False,
        batch_size=2,
        run_name="weights",
        adapter=OUTPUT_ATTENTION,
    )
    return TrainConfig(**{**settings, **values})


def trained(stack, cfg, folder, resume=None):
    model, _, _, data = stack
    request = RunRequest(model, data, cfg, resume=resume)  # (algorithm full: the weights train)
    preflight(request)
    with torch.inference_mode(False):
        return train_run(request, str(folder))


@pytest.fixture(scope="module")
def learned(quality_stack, tmp_path_factory):
    """One run training the output blocks' attention weights, with the input MODEL's probe output before."""
    model, _, _, data = quality_stack
    probe = ProbeInput.of(model, data)
    before = probe.output(model)
    started = time.perf_counter()
    result = trained(
        quality_stack, config(steps=STEPS, learning_rate=RATE, save_every=0), tmp_path_factory.mktemp("learned")
    )
    return {"result": result, "probe": probe, "before": before, "seconds": time.perf_counter() - started}


STEPS, RATE = 60, 5e-3  # 2026 CPU run: 1.2653 -> 0.8232 (0.651) in 12.6 s


def test_training_the_output_blocks_attention_weights_lowers_the_evaluation_loss_by_30_percent(learned):
    result = learned["result"]
    weights = result.trained
    assert isinstance(weights, TrainedWeights)
    names = list(weights.copies.layer_names)
    assert len(names) == 48 and all(".output_blocks." in n and ".attn" in n for n in names), names
    ratio = result.eval_loss_after / result.eval_loss_before
    before, after = result.eval_loss_before, result.eval_loss_after
    print(f"eval loss {before:.4f} -> {after:.4f} ({ratio:.3f}) in {learned['seconds']:.1f} s")
    assert ratio < 0.7, (result.eval_loss_before, result.eval_loss_after, learned["seconds"])


def test_the_input_model_computes_bit_for_bit_as_before_and_the_result_model_differently(learned, quality_stack):
    model = quality_stack[0]
    probe, result = learned["probe"], learned["result"]
    trained_output = probe.output(result.patcher)
    assert torch.equal(probe.output(model), learned["before"])
    assert relative_error(trained_output, learned["before"]) > 1e-2


def test_the_saved_file_is_the_whole_diffusion_model_with_the_trained_weights(learned, quality_stack):
    model = quality_stack[0]
    result = learned["result"]
    saved, metadata = comfy.utils.load_torch_file(result.checkpoints[-1], return_metadata=True)
    base = {k: v.cpu() for k, v in model.model.diffusion_model.state_dict().items()}  # (as the file is read)
    assert saved.keys() == base.keys() and metadata[TRAINED_KIND] == "weights"
    trained_keys = set(result.trained.named_tensors())
    assert len(trained_keys) == 48 + 12  # each layer's weight, and the output projections' biases
    assert all(torch.equal(saved[k], base[k]) for k in base if k not in trained_keys)
    assert all(not torch.equal(saved[k], base[k]) for k in trained_keys)


def test_the_saved_file_loads_as_unetloader_loads_it_and_gives_the_result_model_s_output(learned, quality_stack):
    """comfy.sd.load_diffusion_model's steps on the file: detection reads its layout as the tiny SD1.5's
    config; the model class is the MODEL's own (the stock list knows SD1.5 by its full width, 320, and the
    tiny one's head count is set by hand: no layout tells it)."""
    model = quality_stack[0]
    result, probe = learned["result"], learned["probe"]
    saved, metadata = comfy.utils.load_torch_file(result.checkpoints[-1], return_metadata=True)
    detected = comfy.model_detection.detect_unet_config(saved, "", metadata=metadata)
    own = model.model.model_config.unet_config
    assert {k: detected[k] for k in detected if k in own} == {k: own[k] for k in detected if k in own}
    keys = set(saved)
    loaded = model.model.model_config.get_model(saved, "")
    loaded.load_model_weights(saved, "")  # (takes the tensors it loads out of `saved`)
    assert set(loaded.diffusion_model.state_dict()) == keys and saved == {}
    device = comfy.model_management.get_torch_device()
    patcher = comfy.model_patcher.ModelPatcher(loaded, load_device=device, offload_device=torch.device("cpu"))
    error = relative_error(probe.output(patcher), probe.output(result.patcher))
    print(f"stock reload relative error {error:.3g}")
    assert error < merged_tolerance(result.patcher, 1e-5, 5e-3), error  # (a GPU: half precision)


def test_three_steps_then_three_resumed_equal_six_straight(quality_stack, tmp_path):
    whole = trained(quality_stack, config(), tmp_path / "whole")
    middle = load_resume_point(str(tmp_path / "whole" / "checkpoints" / "weights_step000003.safetensors"))
    assert middle.state is not None and middle.state["step"] == 3
    resumed = trained(quality_stack, config(), tmp_path / "resumed", resume=middle)
    a, b = whole.lora.tensors, resumed.lora.tensors
    if quality_stack[0].load_device.type == "cpu":  # bit for bit
        assert len(whole.losses) == 6 and resumed.losses == whole.losses
        assert resumed.eval_loss_after == whole.eval_loss_after
        assert a.keys() == b.keys() and [k for k in a if not torch.equal(a[k], b[k])] == []
    else:  # a GPU's backward sums in no fixed order: no further apart than the six steps straight run again
        again = trained(quality_stack, config(), tmp_path / "again")
        assert len(whole.losses) == 6
        no_further_than_a_repeat(resumed.losses, whole.losses, again.losses)
        no_further_than_a_repeat(b, a, again.lora.tensors)
    assert [k for k in a if not torch.equal(a[k], middle.tensors[k])] != []  # (the last three steps changed some)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="where the weights live: a GPU beside host memory")
def test_the_trained_layers_own_weights_stay_in_host_memory_and_the_others_load(quality_stack, tmp_path):
    """Their copies compute in their place: the device holds the copies and the layers not trained, never the
    trained layers' own weights (a full fine-tune of SDXL: its bf16 UNet, 5 GB, less)."""
    from eridiffusion.training.run.trainer import TrainingHooks

    model, _, _, data = quality_stack
    unet = model.model.diffusion_model
    trained_layers = [m for name, m in unet.named_modules() if "output_blocks" in name and name.endswith(".to_q")]
    untrained = [m for name, m in unet.named_modules() if "input_blocks" in name and name.endswith(".to_q")]
    seen = []

    def where(step, *_):
        seen.append(({m.weight.device.type for m in trained_layers}, {m.weight.device.type for m in untrained}))

    request = RunRequest(model, data, config(steps=2, save_every=0))
    preflight(request)
    with torch.inference_mode(False):
        result = train_run(request, str(tmp_path), TrainingHooks(on_progress=where))
    assert seen == [({"cpu"}, {"cuda"})] * 2
    assert result.eval_loss_before > 0  # (measured at the end, the trained layers bypassed: from host memory)


def test_algorithm_full_builds_the_weights_kind_and_other_algorithms_adapters(quality_stack):
    model, _, _, data = quality_stack
    assert RunRequest(model, data, config()).builder is trained_weights
    assert RunRequest(model, data, config(adapter=AdapterSpec())).builder is not trained_weights


@pytest.mark.parametrize(
    "settings, named",
    [
        ({"text_encoder_lr": 1e-5}, "set text_encoder_lr to 0"),
        ({"fp8_compute": True}, "turn fp8_compute off"),
        ({"base_quantization": "nf4"}, "base_quantization nf4 holds each layer's weight quantized, and full needs"),
    ],
)
def test_settings_that_cannot_train_beside_the_weights_are_refused_in_the_preflight(quality_stack, settings, named):
    model, clip, _, data = quality_stack
    with pytest.raises(EriDiffusionError, match=named):
        preflight(RunRequest(model, data, config(**settings), clip=clip))


def test_a_base_loaded_in_fp8_is_refused_by_name_in_the_preflight(quality_stack):
    """UNETLoader's weight_dtype fp8_e4m3fn: the weights are stored rounded to fp8 and would be saved so."""
    from eridiffusion.tiny_models import tiny_sd15

    fp8 = tiny_sd15(seed=0, weight_dtype=torch.float8_e4m3fn)[0]
    with pytest.raises(
        EriDiffusionError, match=r"diffusion_model\.\S+: torch\.float8_e4m3fn\).*Load the model in bf16"
    ):
        preflight(RunRequest(fp8, quality_stack[3], config()))


def test_a_mixed_quantized_base_is_refused_by_name_in_the_preflight(quality_stack):
    """An fp8_scaled checkpoint as ComfyUI 0.28 loads it (MixedPrecisionOps layers holding QuantizedTensors)."""
    from devkit.quantized_bases import LOADS_PER_LAYER_QUANTIZATION, tiny_sd15_fp8_scaled

    if not LOADS_PER_LAYER_QUANTIZATION:
        pytest.skip("this ComfyUI loads no per-layer quantization (0.28 on)")
    scaled = tiny_sd15_fp8_scaled(seed=0)[0]
    with pytest.raises(
        EriDiffusionError, match=r"loaded \d+ of this model's weights quantized \(e\.g\. diffusion_model"
    ):
        preflight(RunRequest(scaled, quality_stack[3], config()))
