"""Stopping and resuming: N + N steps equal 2N uninterrupted, checkpoints kept, clear refusals."""

import os

import pytest
import torch

from devkit.tiny_models import build_tiny
from eridiffusion.errors import EriDiffusionError
from eridiffusion.formats.state_file import state_path
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.evaluation import evaluation_loss
from eridiffusion.training.run.resume import load_resume_point
from eridiffusion.training.run.trainer import train_lora

pytestmark = pytest.mark.one_host(
    "the loop's resume arithmetic (through the executor: test_resume_and_state_files.py, both hosts)"
)


@pytest.fixture(scope="module")
def stack(dog_dataset, tmp_path_factory):
    model, clip, vae = build_tiny("sd15", seed=0)
    with torch.inference_mode():
        data = build_training_data(
            dog_dataset, vae, clip, 128, str(tmp_path_factory.mktemp("cache")), shuffle_variants=1
        )
    data.samples = data.samples[:4]
    return model, clip, data


def config(algorithm="lora", **overrides):
    algorithm, _, extra = algorithm.partition("+")  # "lora+norms": norms and biases trained too
    settings = dict(
        steps=12,
        learning_rate=3e-3,
        dtype="fp32",
        seed=3,
        log_every=4,
        save_every=6,
        gradient_checkpointing=False,
        batch_size=2,
        run_name="resumable",
        eval_images=2,  # (each run evaluates before and after: a 12-step run's largest cost at 8 x 8)
        eval_timesteps=2,
        adapter=AdapterSpec(
            algorithm=algorithm, rank=4, alpha=4.0, targets="all-linear", train_norms_and_biases=extra == "norms"
        ),
    )
    settings.update(overrides)
    return TrainConfig(**settings)


def run(stack, cfg, folder, resume=None, text_encoder=False):
    model, clip, data = stack
    with torch.inference_mode(False):
        return train_lora(model, data, cfg, str(folder), clip=clip if text_encoder else None, resume=resume)


def adapter_tensors(result):
    return {k: v for k, v in result.lora.tensors.items()}


@pytest.mark.parametrize("algorithm", ["lora", "dora", "lokr", "loha", "oft", "boft", "glora", "lora+norms"])
def test_resuming_from_the_middle_gives_the_uninterrupted_result(algorithm, stack, tmp_path):
    whole = run(stack, config(algorithm), tmp_path / "whole")
    middle = os.path.join(tmp_path / "whole", "checkpoints", "resumable_step000006.safetensors")
    point = load_resume_point(middle)
    assert point.state is not None and point.state["step"] == 6
    resumed = run(stack, config(algorithm), tmp_path / "resumed", resume=point)
    assert resumed.losses == pytest.approx(whole.losses, abs=1e-6)
    a, b = adapter_tensors(whole), adapter_tensors(resumed)
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6


def test_resuming_with_a_trained_text_encoder_gives_the_uninterrupted_result(stack, tmp_path):
    cfg = config(text_encoder_lr=1e-3)
    whole = run(stack, cfg, tmp_path / "whole", text_encoder=True)
    point = load_resume_point(os.path.join(tmp_path / "whole", "checkpoints", "resumable_step000006.safetensors"))
    resumed = run(stack, cfg, tmp_path / "resumed", resume=point, text_encoder=True)
    a, b = adapter_tensors(whole), adapter_tensors(resumed)
    assert any(k.startswith("lora_te_") for k in a)
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6


def test_periodic_checkpoints_keep_the_newest_n_with_their_state(stack, tmp_path):
    run(stack, config(steps=12, save_every=3, keep_last=2), tmp_path)
    files = sorted(os.listdir(tmp_path / "checkpoints"))
    assert files == [
        "resumable_step000009.safetensors",
        "resumable_step000009.training_state",
        "resumable_step000012.safetensors",
        "resumable_step000012.training_state",
    ]


def test_resuming_with_other_settings_is_refused_naming_them(stack, tmp_path):
    run(stack, config(), tmp_path / "first")
    point = load_resume_point(os.path.join(tmp_path / "first", "checkpoints", "resumable_step000006.safetensors"))
    with pytest.raises(EriDiffusionError, match="learning_rate"):
        run(stack, config(learning_rate=1e-3), tmp_path / "second", resume=point)


def test_a_lora_file_without_state_continues_from_its_weights(stack, tmp_path):
    first = run(stack, config(), tmp_path / "first")
    path = first.lora.save(str(tmp_path / "plain.safetensors"), dtype="fp32")
    assert not os.path.exists(state_path(path))
    point = load_resume_point(path)
    model, _, data = stack
    continued = run(stack, config(steps=1, save_every=0), tmp_path / "continued", resume=point)
    assert continued.eval_loss_before == pytest.approx(first.eval_loss_after, rel=1e-5)
    assert continued.eval_loss_before < 0.95 * evaluation_loss(model, data, config())


def test_missing_or_unreadable_resume_file_names_the_file(tmp_path):
    with pytest.raises(EriDiffusionError, match="does not exist"):
        load_resume_point(str(tmp_path / "nope.safetensors"))
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"not safetensors")
    with pytest.raises(EriDiffusionError, match="broken.safetensors"):
        load_resume_point(str(broken))


def test_a_state_written_before_a_setting_existed_resumes_with_that_setting_at_its_default(stack, tmp_path):
    """A checkpoint of an earlier version has no value for the settings added since (EMA, masks,
    block_lr, ...): they are taken at their defaults, which train as that version did, so it
    continues; a setting that differs still refuses it."""
    run(stack, config(), tmp_path / "first")
    point = load_resume_point(os.path.join(tmp_path / "first", "checkpoints", "resumable_step000006.safetensors"))
    older = dict(point.state["config"])
    for newer in ("ema_decay", "ema_warmup", "mask_min", "block_lr", "device", "precision"):
        del older[newer]
    older["adapter"] = {k: v for k, v in older["adapter"].items() if k not in ("include", "exclude")}
    older["objective"] = {k: v for k, v in older["objective"].items() if not k.startswith("timestep_m")}
    point.state = {**point.state, "config": older, "config_fingerprint": "written by an older version"}
    continued = run(stack, config(), tmp_path / "continued", resume=point)
    assert len(continued.losses) == 12
    with pytest.raises(EriDiffusionError, match="learning_rate"):
        run(stack, config(learning_rate=1e-3), tmp_path / "changed", resume=point)
