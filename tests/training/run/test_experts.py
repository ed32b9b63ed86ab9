"""Two experts in one run (Wan 2.2 14B's high- and low-noise models): each step trains the expert whose
noise range the step's noise level falls in, each expert only ever on its own range; both learn, both
LoRAs load in stock ComfyUI and reproduce their expert, the samples are drawn by both as the Wan 2.2
workflow draws them, and the inputs are untouched. Tiny Wan stacks of ComfyUI's own classes, clips
made from the real photos."""

import os
from dataclasses import replace

import pytest
import torch

from devkit.short_runs import family_run, quick_samples
from devkit.stock_comfyui import ProbeInput, load_with_stock_comfyui, relative_error
from devkit.tiny_models import TINY_FAMILIES, build_tiny
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.model.family_row import WAN22_EXPERT_BOUNDARY
from eridiffusion.training.run.experts import ExpertPick, check_expert_pair
from eridiffusion.training.run.trainer import train_lora
from eridiffusion.training.samples.render import denoised

FAMILY = "wan21_t2v"  # Wan 2.2 T2V A14B loads as this class: each expert a WanModel


STEPS = 400  # at shift 3, 15% of them (σ >= 8/9) the high-noise expert's


def _config(steps=STEPS, **values):
    return family_run("experts", steps, **values)


def _recording(model, seen):
    """Record the σ of every training forward of `model`'s diffusion model into `seen`."""

    def record(module, args, kwargs):
        if torch.is_grad_enabled():  # (evaluation and sampling run without autograd)
            seen.extend((args[1] / 1000).tolist())  # Wan's timestep: 1000 σ

    return model.model.diffusion_model.register_forward_pre_hook(record, with_kwargs=True)


@pytest.fixture(scope="module")
def experts(dog_clips, tmp_path_factory):
    folder = tmp_path_factory.mktemp("experts")
    high, clip, vae = build_tiny(FAMILY, seed=0)
    low = build_tiny(FAMILY, seed=1)[0]
    with torch.inference_mode():
        data = build_training_data(dog_clips, vae, clip, TINY_FAMILIES[FAMILY].resolution, str(folder / "cache"))
        sample = quick_samples(clip, vae, "a photo of sks dog", 64, 64, frames=5, steps=4)
    data.samples = data.samples[:4]
    probes = {name: ProbeInput.of(model, data) for name, model in (("high", high), ("low", low))}
    before = {name: probes[name].output(model) for name, model in (("high", high), ("low", low))}
    seen = {"high": [], "low": []}
    hooks = [_recording(high, seen["high"]), _recording(low, seen["low"])]
    try:
        with torch.inference_mode(False):
            result = train_lora(high, data, _config(), str(folder / "run"), sample_settings=sample, low_noise_model=low)
    finally:
        for hook in hooks:
            hook.remove()
    return {
        "high": high,
        "low": low,
        "result": result,
        "seen": seen,
        "probes": probes,
        "before": before,
        "sample": sample,
    }


def test_each_expert_trains_only_on_its_noise_range(experts):
    high, low = experts["seen"]["high"], experts["seen"]["low"]
    assert len(high) > 40 and len(low) > 250, (len(high), len(low))  # shift 3: 15% of the draws above 8/9
    assert min(high) >= WAN22_EXPERT_BOUNDARY - 1e-6 and max(low) < WAN22_EXPERT_BOUNDARY, (min(high), max(low))


def test_both_experts_evaluation_loss_drops_at_least_30_percent(experts):
    for result in (experts["result"], experts["result"].low_noise):
        assert result.eval_loss_after < 0.7 * result.eval_loss_before, (result.eval_loss_before, result.eval_loss_after)


@pytest.mark.parametrize("expert", ["high", "low"])
def test_each_experts_lora_loads_in_stock_comfyui_and_reproduces_it(experts, expert, tmp_path, caplog):
    result = experts["result"] if expert == "high" else experts["result"].low_noise
    path = result.lora.save(str(tmp_path / f"{expert}.safetensors"), dtype="fp32")
    patched, unmatched = load_with_stock_comfyui(experts[expert], path, 1.0, caplog)
    assert unmatched == []
    probe = experts["probes"][expert]
    assert relative_error(probe.output(patched), probe.output(result.patcher)) < 1e-4
    assert relative_error(probe.output(result.patcher), experts["before"][expert]) > 1e-2
    assert torch.equal(probe.output(experts[expert]), experts["before"][expert])  # the input is untouched


def test_the_run_writes_a_high_and_a_low_noise_checkpoint_and_samples_with_both(experts):
    result = experts["result"]
    names = sorted(os.listdir(os.path.join(result.run_dir, "checkpoints")))
    assert names == [
        "experts_high_noise_step000400.safetensors",
        "experts_high_noise_step000400.training_state",
        "experts_low_noise_step000400.safetensors",
        "experts_low_noise_step000400.training_state",
    ]
    assert result.sample_paths[-1].endswith(".webp") and torch.isfinite(result.samples).all()


def test_samples_are_drawn_by_the_high_noise_expert_down_to_the_boundary_and_by_the_low_noise_one_after(experts):
    result, sample = experts["result"], experts["sample"]
    calls = {"high": 0, "low": 0}
    patchers = {"high": result.patcher, "low": result.low_noise.patcher}
    hooks = [
        patchers[name].model.diffusion_model.register_forward_pre_hook(
            lambda module, args, name=name: calls.__setitem__(name, calls[name] + 1)
        )
        for name in calls
    ]
    latent = torch.zeros(1, 16, 2, 8, 8)
    try:
        with torch.inference_mode():
            prompt = replace(sample.renders()[0], seed=0)
            denoised(patchers["high"], sample, prompt, latent, (patchers["low"], WAN22_EXPERT_BOUNDARY))
    finally:
        for hook in hooks:
            hook.remove()
    # 4 simple steps at the models' shift 8 start at σ 1, 0.96, 0.889 (the boundary) and 0.73
    assert calls == {"high": 3, "low": 1}


def test_switch_boundary_every_gives_each_expert_n_steps_in_turn():
    pick = ExpertPick(None, 0.9, 3, seed=0, tokens=None)
    assert [pick(step) for step in range(8)] == [0, 0, 0, 1, 1, 1, 0, 0]


def test_a_two_expert_run_with_validation_images_is_refused_before_training(dog_clips, tmp_path):
    high, clip, vae = build_tiny(FAMILY, seed=0)
    with torch.inference_mode():
        data = build_training_data(dog_clips, vae, clip, 64, str(tmp_path / "cache"))
    data.validation = data
    with torch.inference_mode(False), pytest.raises(EriDiffusionError, match="validation images"):
        train_lora(high, data, _config(steps=1), str(tmp_path / "run"), low_noise_model=build_tiny(FAMILY, seed=1)[0])


def test_switch_boundary_every_without_a_low_noise_model_is_refused(dog_clips, tmp_path):
    high, clip, vae = build_tiny(FAMILY, seed=0)
    with torch.inference_mode():
        data = build_training_data(dog_clips, vae, clip, 64, str(tmp_path / "cache"))
    with torch.inference_mode(False), pytest.raises(EriDiffusionError, match="connect LoRATrainer's low_noise_model"):
        train_lora(high, data, _config(steps=1, switch_boundary_every=5), str(tmp_path / "run"))


def test_the_same_model_as_both_experts_is_refused_before_training(dog_clips, tmp_path):
    high, clip, vae = build_tiny(FAMILY, seed=0)
    with torch.inference_mode():
        data = build_training_data(dog_clips, vae, clip, 64, str(tmp_path / "cache"))
    with torch.inference_mode(False), pytest.raises(EriDiffusionError, match="the same MODEL is connected"):
        train_lora(high, data, _config(steps=1), str(tmp_path / "run"), low_noise_model=high.clone())
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize("other", ["wan21_i2v", "sdxl"])
def test_a_low_noise_model_of_another_architecture_is_refused_naming_both(other):
    high = build_tiny(FAMILY, seed=0)[0]
    low = build_tiny(other, seed=1)[0]
    with pytest.raises(EriDiffusionError, match="two experts of one architecture") as refused:
        check_expert_pair(high, low)
    assert type(high.model.model_config).__name__ in str(refused.value)


def test_two_experts_of_one_architecture_pass():
    check_expert_pair(build_tiny(FAMILY, seed=0)[0], build_tiny(FAMILY, seed=1)[0])
