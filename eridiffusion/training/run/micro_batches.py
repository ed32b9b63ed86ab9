"""A step's micro-batches: which samples, captions, noise and noise levels each draws, the batch of
tensors it hands the model, and its loss (the objective's, with differential output preservation's
term where asked).

Captions, noise and noise levels are drawn for the whole global micro-batch from generators every
process holds alike, and each process keeps its part: so N processes x batch_size b train exactly
what 1 process x batch_size N*b trains (and a state continues on either), each process on other
samples with other noise. Seeding each process apart would tie the result to the number of processes."""

import torch

from ..model import loading as model_loading
from ..model.forward import prediction, token_count
from ..model.inputs import batch_inputs
from ..model.prepared_data import PreparedData, conditioning_options

INPUT = "input."  # the model inputs' names in a micro-batch's dict of tensors
PRESERVED = "preserved."  # the preservation prompt's model inputs there


def prepared(run, data, preservation=None):
    """PreparedData of `data` (the training or the regularization images) for TrainingRun `run`."""
    return PreparedData(
        run.base,
        data,
        run.device,
        cached_inputs=run.text_encoder is None,
        options=conditioning_options(run.config, run.family),
        mask_floor=run.config.mask_min,
        preservation=preservation,
        streams=(run.config.video_loss_weight, run.config.audio_loss_weight),
    )


class MicroBatches:
    """The micro-batches of TrainingRun `run`'s steps, drawn from its training images (`training`,
    PreparedData) and, with regularization images, from those (`prior`)."""

    def __init__(self, run, training, prior=None):
        self.run, self.training, self.prior = run, training, prior

    @property
    def per_round(self):
        """How many micro-batches of_step yields: the training one, and a prior one with regularization images."""
        return 1 if self.prior is None else 2

    def of_step(self, step):
        """(batch, weight) of each micro-batch of one accumulation round, in turn: a training one
        (with the preservation prompt's inputs on every preservation_every-th step) with weight None,
        and, with regularization images, one of those weighted prior_weight. Each is drawn when the
        one before has been backpropagated (CUDA graphs share one memory pool)."""
        run = self.run
        preserve = run.preservation is not None and step % run.config.preservation_every == 0
        yield self.draw(self.training, run.batches, run.data, preserve=preserve), None
        if self.prior is not None:
            yield self.draw(self.prior, run.prior_batches, run.data.regularization), run.config.prior_weight

    def draw(self, prepared, batches, data, preserve=False):
        """One micro-batch, noised: {"x_t", "sigma", "x0", ["mask"], "input.<name>"...} with
        "preserved.<name>" inputs of the preservation prompt when `preserve`."""
        run = self.run
        objective, device = run.objective, run.device
        drawn = batches.next()
        variants = []
        for i in drawn:
            dropped = data.caption_dropout > 0 and run.choice.random() < data.caption_dropout
            variants.append(None if dropped else run.choice.randrange(prepared.variants(i)))
        part = run.processes.part(drawn)
        indices = drawn[part]
        x0 = torch.stack([prepared.latents[i] for i in indices])
        if run.text_encoder is not None:
            run.text_encoder.micro_batch_starts()
        chosen = [prepared.inputs_for(i, v, run.text_encoder) for i, v in zip(indices, variants[part])]
        noise = objective.noise((len(drawn), *x0.shape[1:]), run.noise_gen, device)[part].to(x0.dtype)
        shape = torch.empty(prepared.shapes[indices[0]], device="meta")  # (audio-video: the video's tokens)
        tokens = token_count(shape, run.base.diffusion_model, run.family.latent_patch)
        sigma = objective.sample_sigmas(len(drawn), run.noise_gen, device, tokens=tokens)[part]
        batch = {"x_t": objective.noisy_latent(x0, noise, sigma), "sigma": sigma, "x0": x0}
        mask = prepared.mask_weights(indices)
        if mask is not None:
            batch["mask"] = mask
        if run.text_encoder is not None:
            model_loading.load(run.patcher, run.config.weights_vram_gib)  # encoding loaded the CLIP
        batch.update({INPUT + name: value for name, value in batch_inputs(chosen).items()})
        if preserve:
            preserved = batch_inputs([prepared.preservation_inputs[i] for i in indices])
            batch.update({PRESERVED + name: value for name, value in preserved.items()})
        return batch


def loss_function(run, transformer_options):
    """loss(batch) of a micro-batch as MicroBatches draws it: the objective's loss of the model's
    prediction (weighted by the batch's mask, if any). With the preservation prompt's inputs, plus
    preservation_weight times the same loss between the trained prediction for that prompt and the
    prediction with the trained change bypassed (under no_grad: the target), times preservation_every
    (the steps it stands for)."""
    objective, config, base = run.objective, run.config, run.base
    preservation_weight = config.preservation_weight * config.preservation_every
    copy_saved = run.family.copies_saved_activations

    def predict(batch, prefix):
        inputs = {name[len(prefix) :]: value for name, value in batch.items() if name.startswith(prefix)}
        return prediction(base, transformer_options, batch["x_t"], batch["sigma"], inputs, copy_saved=copy_saved)

    def loss(batch):
        total = objective.loss(predict(batch, INPUT), batch["x0"], batch["sigma"], batch.get("mask")).mean()
        if any(name.startswith(PRESERVED) for name in batch):
            with torch.no_grad(), run.trained.bypassed():
                base_prediction = predict(batch, PRESERVED)
            drift = objective.loss(predict(batch, PRESERVED), base_prediction, batch["sigma"]).mean()
            total = total + preservation_weight * drift
        return total

    return loss
