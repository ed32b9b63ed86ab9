"""The evaluation and validation losses under a VRAM budget: a budget's plan holds the activations of
the training batch, so the fixed (noise, timestep) pairs run a training batch at a time, not all eight
at once (on an H200 capped at 24 GiB, Flux.2-dev's 32B trained on its fp8 base ran every step and ran
out of memory in the evaluation at the run's end), and give the same losses."""

import pytest
import torch

from eridiffusion.training.model import loading as model_loading
from eridiffusion.training.model.forward import transformer_options_of
from eridiffusion.training.model.objective import Objective
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.evaluation import evaluation_loss
from eridiffusion.training.run.validation import ValidationLoss

PLAIN = TrainConfig(dtype="fp32", eval_timesteps=8, eval_images=2)
# the same products in other batches: equal on the CPU, to a GPU's batched kernels' rounding there (3e-5)
SAME = 1e-4 if torch.cuda.is_available() else 1e-5
BUDGETS = {
    "vram_budget_gib": TrainConfig(dtype="fp32", eval_timesteps=8, eval_images=2, vram_budget_gib=6.0),
    "blocks_to_swap": TrainConfig(dtype="fp32", eval_timesteps=8, eval_images=2, blocks_to_swap=2, batch_size=3),
}


def batches_seen(model, measure):
    """The batch sizes the diffusion model ran while `measure()` ran, and its value."""
    seen = []
    hook = model.model.diffusion_model.register_forward_pre_hook(lambda _, args: seen.append(args[0].shape[0]))
    try:
        with torch.inference_mode(False):
            value = float(measure())
    finally:
        hook.remove()
    return seen, value


@pytest.mark.parametrize("setting", sorted(BUDGETS))
def test_under_a_budget_the_evaluation_runs_a_training_batch_at_a_time_and_gives_the_same_loss(setting, quality_stack):
    model, _, _, data = quality_stack
    config = BUDGETS[setting]
    plain_batches, plain = batches_seen(model, lambda: evaluation_loss(model, data, PLAIN))
    budget_batches, budgeted = batches_seen(model, lambda: evaluation_loss(model, data, config))
    assert plain_batches == [8, 8]
    size = config.batch_size
    per_image = [size] * (8 // size) + ([8 % size] if 8 % size else [])
    assert budget_batches == per_image * 2
    assert budgeted == pytest.approx(plain, rel=SAME)


def test_under_a_budget_the_validation_loss_runs_a_training_batch_at_a_time_and_gives_the_same_loss(quality_stack):
    model, _, _, data = quality_stack

    def validation(config):
        with torch.inference_mode(False):
            model_loading.load(model, 0)
            check = ValidationLoss(
                model.model, data.validation, model.load_device, Objective(model.model.model_sampling), config, {}
            )
        return lambda: check(model, transformer_options_of(model))

    plain_batches, plain = batches_seen(model, validation(PLAIN))
    budget_batches, budgeted = batches_seen(model, validation(BUDGETS["vram_budget_gib"]))
    assert plain_batches == [8] * len(data.validation.samples)
    assert budget_batches == [1] * 8 * len(data.validation.samples)
    assert budgeted == pytest.approx(plain, rel=SAME)
