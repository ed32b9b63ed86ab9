"""Flux-family models train through our frozen-weight aliases and bypass adapters although their
blocks add residuals in place (`img += ...`): with and without gradient checkpointing, to the
same gradients."""

import os

import pytest
import torch

from devkit.stock_comfyui import ProbeInput
from devkit.tiny_models import TINY_FAMILIES, build_tiny
from eridiffusion.comfy_compat import register_fused_rope_backwards
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.model import loading as model_loading
from eridiffusion.training.model.autograd_inplace import OutOfPlaceAugmentedAssignments
from eridiffusion.training.model.forward import prediction
from eridiffusion.training.run.build import TrainingRun
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora
from eridiffusion.training.speed.checkpointing import _CheckpointedForward

FLUX_FAMILIES = ("flux_dev", "chroma", "flux2")


@pytest.fixture(autouse=True)
def fused_rope_backwards():
    """These tests run the model outside training_forward, which gives 0.2x's fused RoPE ops their
    backward: so register it here, whichever test of the session runs first."""
    register_fused_rope_backwards()


_STACKS = {}


def _stack(name, dog_dataset, tmp_path_factory):
    """A tiny stack of the family, its training data (4 photos) and a fixed probe batch."""
    if name not in _STACKS:
        model, clip, vae = build_tiny(name, seed=0)
        folder = str(tmp_path_factory.mktemp(f"autograd_{name}"))
        with torch.inference_mode():
            data = build_training_data(dog_dataset, vae, clip, TINY_FAMILIES[name].resolution, folder)
        data.samples = data.samples[:4]
        _STACKS[name] = (name, model, data, ProbeInput.of(model, data))
    return _STACKS[name]


@pytest.fixture(params=FLUX_FAMILIES)
def flux_stack(request, dog_dataset, tmp_path_factory):
    return _stack(request.param, dog_dataset, tmp_path_factory)


def _config(checkpointing, steps=1):
    return TrainConfig(
        steps=steps,
        learning_rate=3e-3,
        dtype="fp32",
        seed=0,
        log_every=10,
        gradient_checkpointing=checkpointing,
        adapter=AdapterSpec(rank=8, alpha=8.0, targets="all-linear"),
    )


def _adapter_gradients(model, data, probe, checkpointing, run_dir):
    """The adapters' gradient of one loss on the probe batch, and whether the blocks were checkpointed."""
    with torch.inference_mode(False):
        run = TrainingRun(model, data, _config(checkpointing), run_dir)
        try:
            model_loading.load(run.patcher)
            block = run.base.diffusion_model.double_blocks[0]
            wrapped = isinstance(block.__dict__.get("forward"), _CheckpointedForward)
            # LoRA's up matrices start at zero: give every adapter weight a value so every gradient is live
            generator = torch.Generator().manual_seed(3)
            with torch.no_grad():
                for p in run.trained.adapters.parameters():
                    p.copy_(torch.randn(p.shape, generator=generator) * 0.02)
            options = run.patcher.model_options.get("transformer_options", {})
            denoised = prediction(run.base, options, probe.x, probe.sigma, probe.inputs)
            (denoised - probe.x).square().mean().backward()
            return wrapped, torch.cat([p.grad.flatten() for p in run.trained.adapters.parameters()])
        finally:
            run.release()


def test_augmented_assignments_run_out_of_place_only_under_grad():
    weight = torch.ones(3, requires_grad=True)
    x = weight * 2
    alias = x
    explicit = weight * 2
    low = torch.ones(2, dtype=torch.bfloat16)
    with OutOfPlaceAugmentedAssignments():
        x += 1
        x *= 2
        explicit.add_(1)  # an explicit in-place call is meant to mutate: it still does
        low += torch.full((2,), 0.5)
        with torch.no_grad():
            plain = torch.zeros(2)
            same = plain
            plain += 1
    assert x.tolist() == [6.0, 6.0, 6.0] and alias.tolist() == [2.0, 2.0, 2.0]
    assert explicit.tolist() == [3.0, 3.0, 3.0] and explicit._version == 1
    assert low.dtype == torch.bfloat16 and low.tolist() == [1.5, 1.5]
    assert same is plain and same.tolist() == [1.0, 1.0]
    assert "__iadd__" not in torch.Tensor.__dict__  # restored to torch's own on exit
    y = weight * 2
    y_alias = y
    y += 1
    assert y_alias is y and y._version == 1


def test_flux_backward_breaks_on_its_in_place_adds_without_the_context(flux_stack, tmp_path):
    """Why the trainer needs OutOfPlaceAugmentedAssignments: ComfyUI's Flux blocks as they are."""
    _, model, data, probe = flux_stack
    with torch.inference_mode(False):
        run = TrainingRun(model, data, _config(False), str(tmp_path))
        try:
            model_loading.load(run.patcher)
            denoised = run.base.apply_model(probe.x, probe.sigma, **probe.inputs)
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                denoised.square().mean().backward()
        finally:
            run.release()


def test_gradients_are_the_same_with_and_without_gradient_checkpointing(flux_stack, tmp_path):
    _, model, data, probe = flux_stack
    plain_wrapped, plain = _adapter_gradients(model, data, probe, False, str(tmp_path / "plain"))
    checkpointed_wrapped, checkpointed = _adapter_gradients(model, data, probe, True, str(tmp_path / "ckpt"))
    assert (plain_wrapped, checkpointed_wrapped) == (False, True)
    assert float(plain.norm()) > 1e-3
    assert float((plain != 0).float().mean()) > 0.9
    assert float((checkpointed - plain).norm() / plain.norm()) < 1e-5


def test_flux_training_with_checkpointing_follows_the_same_losses(dog_dataset, tmp_path_factory, tmp_path):
    _, model, data, _ = _stack("flux_dev", dog_dataset, tmp_path_factory)
    results = {}
    for checkpointing in (False, True):
        with torch.inference_mode(False):
            results[checkpointing] = train_lora(
                model, data, _config(checkpointing, steps=30), os.path.join(str(tmp_path), str(checkpointing))
            )
    plain, checkpointed = torch.tensor(results[False].losses), torch.tensor(results[True].losses)
    assert len(plain) == 30
    assert float(((checkpointed - plain).abs() / plain).max()) < 1e-4
    assert results[True].eval_loss_after < 0.8 * results[True].eval_loss_before
