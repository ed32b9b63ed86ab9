"""The cached samples made ready for training on the device: latents in model space and, unless
captions are encoded live, each caption's model inputs."""

import torch

from .inputs import model_inputs


def conditioning_options(config, family):
    """Inputs the trainer adds to every conditioning, as ComfyUI's nodes would (FluxGuidance…):
    the guidance value of guidance-distilled models, or None, which skips their guidance embedding.
    Without a value from the config or the family, the model's own ComfyUI default applies."""
    if config.bypass_guidance_embedding:
        return {"guidance": None}
    guidance = config.guidance if config.guidance >= 0 else family.guidance
    return {} if guidance is None else {"guidance": guidance}


def sample_options(options, sample):
    """`options` with what one sample adds: an inpainting model's masked image latent and mask, as
    InpaintModelConditioning sets them (concat_latent_image, concat_mask)."""
    inpaint = getattr(sample, "inpaint", None)
    if inpaint is None:
        return options
    latent, mask = inpaint
    return {**options, "concat_latent_image": latent[None].float(), "concat_mask": mask[None].float()}


class PreparedData:
    """Latents (model space), loss weights of masked samples and, unless captions are encoded live,
    model inputs of every sample, on the training device."""

    def __init__(
        self, base_model, data, device, limit=None, cached_inputs=True, options=None, mask_floor=0.0, preservation=None
    ):
        self.base_model, self.device, self.options = base_model, device, options or {}
        self.latents, self.inputs, self.empty_inputs, self.captions, self.sizes = [], [], [], [], []
        self.references = []  # edit pairs: each sample's reference latents (VAE space)
        self.sample_options = []  # each sample's conditioning options (sample_options)
        self.masks = []  # per latent position: mask_floor + (1 - mask_floor) · mask; None without a mask
        self.preservation_inputs = []  # with a `preservation` conditioning: its model inputs for each sample
        for sample in data.samples[:limit]:
            latent = base_model.process_latent_in(sample.latent[None].float()).to(device, copy=True)[0]
            self.latents.append(latent)
            mask = getattr(sample, "mask", None)
            self.masks.append(None if mask is None else (mask_floor + (1 - mask_floor) * mask.float()).to(device))
            self.captions.append(list(sample.captions))
            self.sizes.append(sample.bucket)
            self.references.append(sample.reference_latents)
            options_of = sample_options(self.options, sample)
            self.sample_options.append(options_of)
            if cached_inputs:
                # Reused every step, so built without autograd: some extra_conds run model layers
                # (LTX-2's text connectors), which may carry adapters; a graph through them would be
                # freed by the first backward.
                with torch.no_grad():
                    self.inputs.append(
                        [
                            model_inputs(
                                base_model, c, latent, device, sample.bucket, options_of, sample.reference_latents
                            )
                            for c in sample.conditionings
                        ]
                    )
                    if preservation is not None:
                        self.preservation_inputs.append(
                            model_inputs(
                                base_model,
                                preservation,
                                latent,
                                device,
                                sample.bucket,
                                options_of,
                                sample.reference_latents,
                            )
                        )
                    self.empty_inputs.append(
                        model_inputs(
                            base_model,
                            data.empty_conditioning,
                            latent,
                            device,
                            sample.bucket,
                            options_of,
                            sample.reference_latents,
                        )
                    )

    def mask_weights(self, indices):
        """The loss weights (batch, 1, h, w) of samples `indices`, or None when none has a mask (a
        sample without one weighs 1 everywhere)."""
        masks = [self.masks[i] for i in indices]
        if all(m is None for m in masks):
            return None
        return torch.stack([torch.ones_like(self.latents[i][:1]) if m is None else m for i, m in zip(indices, masks)])

    def variants(self, index):
        return len(self.captions[index])

    def inputs_for(self, index, variant, text_encoder=None):
        """Model inputs of sample `index` with caption `variant` (None: the empty caption)."""
        if text_encoder is None:
            return self.empty_inputs[index] if variant is None else self.inputs[index][variant]
        text = "" if variant is None else self.captions[index][variant]
        return model_inputs(
            self.base_model,
            text_encoder.conditioning(text),
            self.latents[index],
            self.device,
            self.sizes[index],
            self.sample_options[index],
            self.references[index],
            pooled_on_device=text_encoder.encodings_on_device,
        )
