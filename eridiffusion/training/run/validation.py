"""The validation loss of a run: the model's loss on images it never trains on, at fixed noise and
fixed noise levels (the same at every check, spread over the trained range), summed on the device
and read back once per check. The lowest one marks the run's best checkpoint."""

import torch

from ..model import loading as model_loading
from ..model.forward import prediction
from ..model.inputs import batch_inputs
from ..model.prepared_data import PreparedData
from .evaluation import timestep_parts


class ValidationLoss:
    """`data`: the validation TrainingData (CacheLatents' held-out images). Every call measures the
    same (image, noise, noise level) triples, so an unchanged adapter gives the same value."""

    def __init__(self, base, data, device, objective, config, options, text_encoder=None, seed=1234):
        self.base, self.device, self.objective, self.config = base, device, objective, config
        self.text_encoder, self.seed = text_encoder, seed
        with torch.no_grad():
            self.prepared = PreparedData(
                base,
                data,
                device,
                cached_inputs=text_encoder is None,
                options=options,
                mask_floor=config.mask_min,
            )
        self.sigmas = objective.spread_sigmas(config.eval_timesteps, device)

    def __call__(self, patcher, transformer_options):
        """The mean loss over the validation set, as a device tensor (no read-back here)."""
        count = len(self.sigmas)
        # the same noise every check, drawn on the device (no copy from the host each time)
        generator = torch.Generator(device=self.device).manual_seed(self.seed)
        total = torch.zeros((), device=self.device)
        with torch.no_grad():
            for index, latent in enumerate(self.prepared.latents):
                inputs = self.prepared.inputs_for(index, 0, self.text_encoder)
                if self.text_encoder is not None:  # encoding loaded the CLIP
                    model_loading.load(patcher, self.config.weights_vram_gib)
                x0 = latent[None].expand(count, *latent.shape)
                noise = torch.randn(x0.shape, generator=generator, device=self.device)
                x_t = self.objective.noisy_latent(x0, noise, self.sigmas)
                mask = self.prepared.mask_weights([index])  # (masked images: the loss where they learn)
                for part in timestep_parts(self.config, count):
                    batch = batch_inputs([inputs] * (part.stop - part.start))
                    denoised = prediction(self.base, transformer_options, x_t[part], self.sigmas[part], batch)
                    total += self.objective.loss(denoised, x0[part], self.sigmas[part], mask).sum()
        return total / (count * len(self.prepared.latents))
