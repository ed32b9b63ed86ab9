"""Prior preservation: regularization (class) images drawn beside the training images at
prior_weight, and differential output preservation of a class phrase (tiny SD1.5, 64 px)."""

import dataclasses
import os

import comfy.model_management
import pytest
import torch

from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.model.inputs import batch_inputs, model_inputs
from eridiffusion.training.run.build import TrainingRun
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.micro_batches import MicroBatches
from eridiffusion.training.run.preflight import preflight
from eridiffusion.training.run.request import RunRequest
from eridiffusion.training.run.trainer import TrainingHooks, train, train_lora
from eridiffusion.training.speed.step_path import StepPath

CLASS_PHRASE = "a photo of dog"


@pytest.fixture
def stack(quality_stack):
    model, clip, vae, data = quality_stack
    return model, clip, vae, dataclasses.replace(data, validation=None)


def config(**values):
    settings = dict(
        steps=3,
        learning_rate=5e-3,
        dtype="fp32",
        gradient_checkpointing=False,
        log_every=3,
        adapter=AdapterSpec(rank=8, alpha=8.0, targets="all-linear"),
        run_name="prior",
    )
    return TrainConfig(**{**settings, **values})


def train_watching_micro_batches(run, watch):
    """train(run) with watch(batches, preserve, loss) after each micro-batch; the run released after."""
    draw, loss_of = MicroBatches.draw, StepPath.loss
    drawn = []

    def watched_draw(self, prepared, batches, source, preserve=False):
        drawn.append((batches, preserve))
        return draw(self, prepared, batches, source, preserve)

    def watched_loss(self, batch):
        loss = loss_of(self, batch)
        watch(*drawn.pop(), loss)
        return loss

    try:
        with pytest.MonkeyPatch.context() as patch, torch.inference_mode(False):
            patch.setattr(MicroBatches, "draw", watched_draw)
            patch.setattr(StepPath, "loss", watched_loss)
            return train(run, None, TrainingHooks())
    finally:
        run.release()


def output_drift(model, trained, clip, data, prompt):
    """‖trained − base‖ / ‖base‖ of the model outputs for `prompt` on every training latent at three
    fixed noise levels and fixed noise."""
    conditioning = clip.encode_from_tokens_scheduled(clip.tokenize(prompt))
    outputs = []
    with torch.inference_mode():
        for patcher in (model, trained):
            comfy.model_management.load_models_gpu([patcher], force_full_load=True)
            base, found, device = patcher.model, [], patcher.load_device
            for index, sample in enumerate(data.samples):
                latent = base.process_latent_in(sample.latent[None].float()).to(device)
                inputs = batch_inputs([model_inputs(base, conditioning, latent[0], device, sample.bucket)])
                noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(index)).to(device)
                for fraction in (0.3, 0.6, 0.9):
                    sigma = torch.tensor([float(base.model_sampling.percent_to_sigma(fraction))], device=device)
                    x_t = base.model_sampling.noise_scaling(sigma, noise, latent)
                    found.append(base.apply_model(x_t, sigma, **inputs).float().cpu())
            outputs.append(torch.cat(found))
    return ((outputs[1] - outputs[0]).norm() / outputs[0].norm()).item()


@pytest.mark.one_host("the preservation loss is EriDiffusion's own")
def test_output_preservation_keeps_the_class_phrase_closer_to_the_base_while_the_loss_still_falls(stack, tmp_path):
    model, clip, _, data = stack
    runs = {}
    for name, phrase in (("off", ""), ("on", CLASS_PHRASE)):
        with torch.inference_mode(False):
            runs[name] = train_lora(
                model, data, config(steps=60, log_every=20, preservation_prompt=phrase), str(tmp_path / name), clip=clip
            )
    drift = {name: output_drift(model, result.patcher, clip, data, CLASS_PHRASE) for name, result in runs.items()}
    on = runs["on"]
    assert on.eval_loss_after < 0.7 * on.eval_loss_before, (on.eval_loss_before, on.eval_loss_after)
    assert drift["on"] < 0.7 * drift["off"], drift  # (measured 0.21 against 0.47 or so)


def test_preservation_every_n_steps_runs_on_those_steps_only_weighted_by_n(stack, tmp_path):
    """preservation_every=2: the preservation prompt's pass comes on steps 0, 2, 4, and its loss counts
    twice there; the first step's loss (one adapter, one draw of noise for every run) splits as
    training + N x preservation_weight x drift."""
    model, clip, _, data = stack
    first_losses = {}
    for name, values in (
        ("off", {}),
        ("every1", {"preservation_prompt": CLASS_PHRASE}),
        ("every2", {"preservation_prompt": CLASS_PHRASE, "preservation_every": 2}),
    ):
        run = TrainingRun(model, data, config(steps=5, log_every=5, **values), str(tmp_path / name), clip=clip)
        run.progress.eval_before = 0.0
        with torch.inference_mode(False), torch.no_grad():  # an adapter that already moves the output
            for index, (_, adapter) in enumerate(run.trained.adapters.items()):
                generator = torch.Generator().manual_seed(index)
                up = adapter.lycoris.lora_up.weight
                up.copy_(torch.randn(up.shape, generator=generator) * 0.05)
        preserved = []
        result = train_watching_micro_batches(run, lambda _, preserve, __, seen=preserved: seen.append(preserve))
        first_losses[name] = result.losses[0]
        if name == "every2":
            assert preserved == [True, False, True, False, True]
    drift = first_losses["every1"] - first_losses["off"]
    assert drift > 1e-4 * first_losses["off"]
    assert first_losses["every2"] - first_losses["off"] == pytest.approx(2 * drift, rel=1e-4)


def test_regularization_images_come_one_micro_batch_beside_each_training_one_weighted_by_prior_weight(
    stack, datasets_dir, tmp_path
):
    model, clip, vae, data = stack
    cats = load_dataset(os.path.join(datasets_dir, "dreambooth_cat"))
    dogs = load_dataset(os.path.join(datasets_dir, "dreambooth_dog"))
    with torch.inference_mode():
        data = build_training_data(dogs, vae, clip, 64, str(tmp_path / "cache"), regularization_dataset=cats)
    assert len(data.regularization.samples) == 5 and len(data.samples) == 5
    run = TrainingRun(model, data, config(grad_accum=2, prior_weight=0.25), str(tmp_path / "run"))
    run.progress.eval_before = 0.0
    drawn, losses = [], []

    def watch(batches, preserve, loss):
        drawn.append("cat" if batches is run.prior_batches else "dog")
        losses.append(float(loss.detach()))

    result = train_watching_micro_batches(run, watch)
    assert drawn == ["dog", "cat"] * 6  # 3 steps of 2 micro-batches, each with its class batch
    for step in range(3):
        dog, cat = losses[4 * step : 4 * step + 4 : 2], losses[4 * step + 1 : 4 * step + 4 : 2]
        assert result.losses[step] == pytest.approx((sum(dog) + 0.25 * sum(cat)) / 2, rel=1e-5)


def test_preservation_without_a_clip_and_regularization_at_weight_zero_are_refused(stack, tmp_path):
    model, _, _, data = stack
    with pytest.raises(EriDiffusionError, match="connect the graph's CLIP to LoRATrainer's clip input"):
        preflight(RunRequest(model, data, config(preservation_prompt=CLASS_PHRASE)))
    with pytest.raises(EriDiffusionError, match="prior_weight is 0"):
        preflight(RunRequest(model, dataclasses.replace(data, regularization=data), config(prior_weight=0.0)))
    with pytest.raises(EriDiffusionError, match="set text_encoder_lr to 0"):
        config(preservation_prompt=CLASS_PHRASE, text_encoder_lr=1e-4)
