"""The cached samples made ready for training on the device: latents in model space and, unless
captions are encoded live, each caption's model inputs."""

import math

import comfy.utils
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


def model_latent(base_model, sample):
    """(a TrainingSample's latent in model space, the conditioning values its layout adds): an
    audio-video sample's video and audio latents packed into one (1, n) latent, as ComfyUI's sampler
    packs the nested latent of LTXVConcatAVLatent, with their latent_shapes."""
    if sample.audio_latent is None:
        return base_model.process_latent_in(sample.latent[None].float())[0], {}
    packed, shapes = comfy.utils.pack_latents([sample.latent[None].float(), sample.audio_latent[None].float()])
    return base_model.process_latent_in(packed)[0], {"latent_shapes": shapes}


def sample_values(sample, layout):
    """What host nodes set on one sample's conditioning: an image-to-video start image's or an inpainting
    model's masked image (concat_latent_image and concat_mask, as WanImageToVideo and
    InpaintModelConditioning set them), an audio-video clip's frame_rate, and `layout` (model_latent's)."""
    values = {**sample.conditioning_values, **layout}
    inpaint = getattr(sample, "inpaint", None)
    if inpaint is not None:
        latent, mask = inpaint
        values.update(concat_latent_image=latent[None].float(), concat_mask=mask[None].float())
    return values


def stream_weights(shapes, weights):
    """(1, n) loss weights of a packed latent of `shapes` (the video's, the audio's): on each stream its
    weight of `weights` times n / its size, so the mean loss is the weighted sum of each stream's mean."""
    sizes = [math.prod(shape[1:]) for shape in shapes]
    return torch.cat([torch.full((1, size), weight * sum(sizes) / size) for size, weight in zip(sizes, weights)], -1)


class PreparedData:
    """Latents (model space), loss weights of masked samples (and of the streams of audio-video ones,
    by `streams`: the video's and the audio's weight) and, unless captions are encoded live, model
    inputs of every sample, on the training device."""

    def __init__(
        self,
        base_model,
        data,
        device,
        limit=None,
        cached_inputs=True,
        options=None,
        mask_floor=0.0,
        preservation=None,
        streams=(1.0, 1.0),
    ):
        self.base_model, self.device, self.options = base_model, device, options or {}
        self.latents, self.inputs, self.empty_inputs, self.captions, self.sizes = [], [], [], [], []
        self.references = []  # edit pairs: each sample's reference latents (VAE space)
        self.shown = []  # picture prompts: (reference paths, mirrored) the encoder is shown; else None
        self.conditioning_values = []  # what host nodes set on each sample's conditioning (TrainingSample's)
        self.shapes = []  # each sample's latent shape as the model patchifies it (audio-video: the video's)
        self.masks = []  # per latent position: mask_floor + (1 - mask_floor) · mask; None without a mask
        self.preservation_inputs = []  # with a `preservation` conditioning: its model inputs for each sample
        for sample in data.samples[:limit]:
            latent, layout = model_latent(base_model, sample)
            self.latents.append(latent.to(device, copy=True))
            self.shapes.append(layout.get("latent_shapes", [latent[None].shape])[0])
            mask = getattr(sample, "mask", None)
            if "latent_shapes" in layout:
                mask = stream_weights(layout["latent_shapes"], streams)
            elif mask is not None:
                mask = mask_floor + (1 - mask_floor) * mask.float()
            self.masks.append(None if mask is None else mask.to(device))
            self.captions.append(list(sample.captions))
            self.sizes.append(sample.bucket)
            self.references.append(sample.reference_latents)
            picture_prompt = getattr(sample, "picture_prompt", False)
            self.shown.append((sample.shown_pictures, sample.mirrored) if picture_prompt else None)
            self.conditioning_values.append(sample_values(sample, layout))
            if cached_inputs:
                # Reused every step, so built without autograd: some extra_conds run model layers
                # (LTX-2's text connectors), which may carry adapters; a graph through them would be
                # freed by the first backward.
                with torch.no_grad():
                    self.inputs.append([self._inputs(len(self.latents) - 1, c) for c in sample.conditionings])
                    if preservation is not None:
                        self.preservation_inputs.append(self._inputs(len(self.latents) - 1, preservation))
                    self.empty_inputs.append(self._inputs(len(self.latents) - 1, data.empty_conditioning))

    def _inputs(self, index, conditioning, pooled_on_device=True):
        """The model inputs of sample `index` under `conditioning`."""
        return model_inputs(
            self.base_model,
            conditioning,
            self.latents[index],
            self.device,
            self.sizes[index],
            self.options,
            self.references[index],
            pooled_on_device=pooled_on_device,
            values=self.conditioning_values[index],
        )

    def mask_weights(self, indices):
        """The loss weights (batch, 1, h, w) of samples `indices`, or None when none has a mask (a
        sample without one weighs 1 everywhere)."""
        masks = [self.masks[i] for i in indices]
        if all(m is None for m in masks):
            return None
        return torch.stack([torch.ones_like(self.latents[i][:1]) if m is None else m for i, m in zip(indices, masks)])

    def stream_mask(self, index, stream):
        """(1, 1, n) loss weights that make the mean loss of audio-video sample `index` that of one of its
        streams (0: the video, 1: the audio)."""
        shapes = self.conditioning_values[index]["latent_shapes"]
        return stream_weights(shapes, [float(k == stream) for k in range(len(shapes))])[None].to(self.device)

    def variants(self, index):
        return len(self.captions[index])

    def inputs_for(self, index, variant, text_encoder=None):
        """Model inputs of sample `index` with caption `variant` (None: the empty caption)."""
        if text_encoder is None:
            return self.empty_inputs[index] if variant is None else self.inputs[index][variant]
        if variant is None:  # (caption dropout's empty prompt is encoded plain, as the cache's)
            conditioning = text_encoder.conditioning("")
        else:
            conditioning = text_encoder.conditioning(self.captions[index][variant], self.shown[index])
        return self._inputs(index, conditioning, text_encoder.encodings_on_device)
