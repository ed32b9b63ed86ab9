"""The evaluation loss: the model's loss at fixed (noise, timestep) pairs on the first images, the
same numbers before and after training, so the drop measures what was learned."""

import torch

from ..model import loading as model_loading
from ..model.families import family_of
from ..model.forward import prediction, transformer_options_of
from ..model.inputs import batch_inputs
from ..model.objective import Objective, sigmas_of_timesteps
from ..model.prepared_data import PreparedData, conditioning_options


def evaluation_loss(patcher, data, config, seed=1234, text_encoder=None, noise_range=(0.0, 1.0), stream=None):
    """Mean native-parameterization loss over `config.eval_timesteps` fixed (noise, timestep) pairs
    per image of the first `config.eval_images`, timesteps spread evenly over the schedule (over the
    `noise_range` part of it: an expert of a two-expert run, its own). `stream` (audio-video samples):
    0 the video's loss alone, 1 the audio's."""
    base = patcher.model
    device = patcher.load_device
    objective = Objective(base.model_sampling)
    # loaded before the inputs are built: some extra_conds run model layers (LTX-2's text connectors)
    model_loading.load(patcher, config.weights_vram_gib)
    with torch.no_grad():
        prepared = PreparedData(
            base,
            data,
            device,
            limit=config.eval_images,
            cached_inputs=text_encoder is None,
            options=conditioning_options(config, family_of(base)),
        )
        ms = base.model_sampling
        t_lo, t_hi = float(ms.timestep(ms.sigma_min.reshape(1))), float(ms.timestep(ms.sigma_max.reshape(1)))
        low, high = noise_range
        spread = (torch.arange(config.eval_timesteps, dtype=torch.float32) + 0.5) / config.eval_timesteps
        fractions = low + (high - low) * spread
        sigmas = sigmas_of_timesteps(ms, t_lo + fractions * (t_hi - t_lo)).float().to(device)
        generator = torch.Generator().manual_seed(seed)
        total, count = 0.0, 0
        transformer_options = transformer_options_of(patcher)
        for index, latent in enumerate(prepared.latents):
            inputs = prepared.inputs_for(index, 0, text_encoder)
            model_loading.load(patcher, config.weights_vram_gib)  # (again, after the text encoder took the device)
            x0 = latent[None].expand(len(sigmas), *latent.shape)
            noise = torch.randn(x0.shape, generator=generator).to(device)
            x_t = objective.noisy_latent(x0, noise, sigmas)
            mask = None if stream is None else prepared.stream_mask(index, stream)
            for part in timestep_parts(config, len(sigmas)):
                batch = batch_inputs([inputs] * (part.stop - part.start))
                denoised = prediction(base, transformer_options, x_t[part], sigmas[part], batch)
                total += float(objective.loss(denoised, x0[part], sigmas[part], mask).sum())
            count += len(sigmas)
    return total / count


def timestep_parts(config, count):
    """The slices of an evaluation's `count` timesteps that run as one batch: all at once, or, under a VRAM
    budget or block swap (whose plan holds the activations of the training batch, not of `count` images), a
    training batch's worth at a time."""
    size = config.batch_size if config.vram_budget_gib > 0 or config.blocks_to_swap > 0 else count
    return [slice(start, min(start + size, count)) for start in range(0, count, size)]
