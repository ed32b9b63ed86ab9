"""Rendering sample images from the model being trained, with ComfyUI's own samplers."""

import math
import os
from dataclasses import dataclass

import comfy.sample
import comfy.samplers
import numpy as np
import torch
from PIL import Image

from ...formats.atomic_file import write_atomic
from ..data.audio import is_audio_vae
from ..model import loading as model_loading
from .audio import decoded_audio, empty_audio_latent, save_audio_sample
from .audio_video import av_latent, decoded_av, save_av_sample
from .inputs import PromptSample


@dataclass(frozen=True)
class SampleSettings:
    """What SampleDuringTraining hands to the trainer: prompts already encoded by the graph's CLIP."""

    prompts: tuple[str, ...]  # the prompt texts, for file names and logs
    positives: tuple  # one ComfyUI conditioning per prompt
    negative: list  # the conditioning of the empty prompt
    vae: object
    every: int
    seed: int
    steps: int
    cfg: float
    sampler: str
    scheduler: str
    width: int
    height: int
    frames: int = 1  # video models: frames per sample
    seconds: float = 10.0  # audio models: seconds per sample
    per_prompt: tuple[PromptSample, ...] = ()  # each prompt with its own settings (else the fields above)
    audio_vae: object = None  # audio-video models (LTX-2): their audio VAE, to sample and write the sound

    def renders(self):
        """The PromptSample of every prompt: `per_prompt`, or the shared settings with seed + k."""
        if self.per_prompt:
            return self.per_prompt
        return tuple(
            PromptSample(text, positive, self.negative, self.width, self.height, self.seed + k, self.steps, self.cfg)
            for k, (text, positive) in enumerate(zip(self.prompts, self.positives))
        )


def empty_latent(model, vae, width, height, frames=1):
    """The zero latent ComfyUI's EmptyLatentImage (or a video model's EmptyLatent node) makes for
    `model`: its latent channels, the VAE's spatial (and temporal) compression."""
    fmt = model.latent_format
    ratio = vae.spacial_compression_encode()
    shape: tuple[int, ...] = (1, fmt.latent_channels)
    if fmt.latent_dimensions == 3:
        shape += ((frames - 1) // (vae.temporal_compression_decode() or 1) + 1,)
    return torch.zeros(shape + (height // ratio, width // ratio))


SAMPLE_FPS = 16  # playback rate of video samples (Wan's rate; a preview, not the model's exact fps)


def render_samples(patcher, settings, step, samples_dir, low_noise=None):
    """Render every prompt on `patcher`; save step_<N>_<k>.png (video: its first frame, and all
    frames as step_<N>_<k>.webp, or with an audio VAE an mp4 with sound; audio: step_<N>_<k>.flac);
    return (grid IMAGE of first frames or of audio's spectrograms, paths: png, webp or mp4 for video,
    flac for audio). `low_noise`: (the low-noise expert's patcher, the σ where it takes over) of a
    two-expert run (see denoised)."""
    images, paths = [], []
    with torch.no_grad():
        for k, prompt in enumerate(settings.renders()):
            latent = _start_latent(patcher, settings, prompt)
            samples = denoised(patcher, settings, prompt, latent, low_noise)
            image, path = _saved(samples, settings, prompt, os.path.join(samples_dir, f"step_{step}_{k}"))
            images.append(image)
            paths.append(path)
    return image_grid(images), paths


def _start_latent(patcher, settings, prompt):
    """The latent a prompt samples from: the inpainted image's, else the empty one of its size
    (audio's; a video's with its sound's beside it where there is an audio VAE)."""
    model = patcher.model
    if prompt.latent is not None:
        return prompt.latent
    if model.latent_format.latent_dimensions == 1:
        return empty_audio_latent(model, settings.vae, settings.seconds)
    latent = empty_latent(model, settings.vae, prompt.width, prompt.height, settings.frames)
    if settings.audio_vae is not None:  # audio-video (LTX-2): the sound's latent beside the frames'
        latent = av_latent(latent, settings.audio_vae, settings.frames)
    return latent


def _saved(samples, settings, prompt, stem):
    """(the sample's (1, H, W, 3) image for the grid, the path it is saved at, `stem` + its suffix)."""
    if is_audio_vae(settings.vae):
        with model_loading.as_comfyui_loads():
            waveform = decoded_audio(settings.vae, samples)
        return save_audio_sample(waveform, settings.vae, stem + ".flac")
    with model_loading.as_comfyui_loads():  # the graph's own VAE: loaded as ComfyUI loads it
        if settings.audio_vae is not None:
            frames, sound = decoded_av(settings.vae, settings.audio_vae, samples)
        else:
            decoded = settings.vae.decode(samples)
            frames, sound = decoded.reshape(-1, *decoded.shape[-3:])[..., :3], None  # video VAEs add a frame axis
    frames = prompt.pasted(frames)  # (inpainting: the source kept outside the mask)
    image = frames[:1].float().clamp(0, 1).cpu()
    path = _save_png(image[0], stem + ".png")
    if sound is not None:  # a video with its sound, shown instead of the first frame
        path = save_av_sample(frames, sound, stem + ".mp4")
    elif len(frames) > 1:  # a video: the animation beside its first frame, and shown instead of it
        path = _save_animation(frames, stem + ".webp")
    return image, path


def denoised(patcher, settings, prompt, latent, low_noise=None):
    """The sampled latent of PromptSample `prompt` from `latent`: one KSampler pass, or with
    `low_noise` (patcher, σ) two, as the Wan 2.2 workflows' two KSamplerAdvanced run them: the
    high-noise model (`patcher`) adds the noise and samples the steps that start at σ >= the
    boundary, returning with the noise left; the low-noise model samples the rest without adding noise."""
    noise = comfy.sample.prepare_noise(latent, prompt.seed)
    common = (prompt.steps, prompt.cfg, settings.sampler, settings.scheduler, prompt.positive, prompt.negative)
    options = {"noise_mask": prompt.noise_mask, "seed": prompt.seed, "disable_pbar": True}
    if low_noise is None:
        return comfy.sample.sample(patcher, noise, *common, latent, **options)
    low_patcher, boundary = low_noise
    sigmas = comfy.samplers.calculate_sigmas(patcher.model.model_sampling, settings.scheduler, prompt.steps)
    switch = int((sigmas[:-1] >= boundary - 1e-4).sum())  # (the boundary is a step's σ, up to rounding)
    high = comfy.sample.sample(patcher, noise, *common, latent, last_step=switch, **options)
    quiet = torch.zeros_like(noise)
    return comfy.sample.sample(low_patcher, quiet, *common, high, start_step=switch, force_full_denoise=True, **options)


def _to_uint8(image):
    return (image.float().clamp(0, 1).cpu().numpy() * 255).round().astype(np.uint8)


def _save_png(image, path):
    pixels = _to_uint8(image)
    return write_atomic(path, lambda tmp: Image.fromarray(pixels).save(tmp, format="PNG"), overwrite=True)


def _save_animation(frames, path):
    """(T,H,W,3) frames as a looping lossless animated WebP at SAMPLE_FPS."""
    pictures = [Image.fromarray(pixels) for pixels in _to_uint8(frames)]
    return write_atomic(
        path,
        lambda tmp: pictures[0].save(
            tmp,
            format="WEBP",
            save_all=True,
            append_images=pictures[1:],
            duration=round(1000 / SAMPLE_FPS),
            loop=0,
            lossless=True,
        ),
        overwrite=True,
    )


def image_grid(images):
    """Tile (1,H,W,3) images into one (1,H',W',3) IMAGE, near-square, row-major; cells are as large
    as the largest image (prompts of their own size), smaller ones at their cell's top left."""
    columns = math.ceil(math.sqrt(len(images)))
    rows = math.ceil(len(images) / columns)
    height, width = max(i.shape[1] for i in images), max(i.shape[2] for i in images)
    grid = torch.zeros(1, rows * height, columns * width, 3)
    for i, image in enumerate(images):
        r, c = divmod(i, columns)
        h, w = image.shape[1:3]
        grid[0, r * height : r * height + h, c * width : c * width + w] = image[0]
    return grid
