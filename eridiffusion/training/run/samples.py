"""Rendering sample images from the model being trained, with ComfyUI's own samplers."""

import math
import os
from dataclasses import dataclass

import comfy.sample
import numpy as np
import torch
from PIL import Image

from ..formats.atomic_file import write_atomic
from ..model import loading as model_loading


@dataclass(frozen=True)
class SampleSettings:
    """What SampleDuringTraining hands to the trainer: prompts already encoded by the graph's CLIP."""

    prompts: tuple  # the prompt texts, for file names and logs
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


def empty_latent(model, vae, width, height, frames=1):
    """The zero latent ComfyUI's EmptyLatentImage (or a video model's EmptyLatent node) makes for
    `model`: its latent channels, the VAE's spatial (and temporal) compression."""
    fmt = model.latent_format
    ratio = vae.spacial_compression_encode()
    shape = (1, fmt.latent_channels)
    if fmt.latent_dimensions == 3:
        shape += ((frames - 1) // (vae.temporal_compression_decode() or 1) + 1,)
    return torch.zeros(shape + (height // ratio, width // ratio))


SAMPLE_FPS = 16  # playback rate of video samples (Wan's rate; a preview, not the model's exact fps)


def render_samples(patcher, settings, step, samples_dir):
    """Render every prompt on `patcher`; save step_<N>_<k>.png (video: its first frame, and all
    frames as step_<N>_<k>.webp); return (grid IMAGE of first frames, paths: png, or webp for video)."""
    images, paths = [], []
    with torch.no_grad():
        for k, positive in enumerate(settings.positives):
            latent = empty_latent(patcher.model, settings.vae, settings.width, settings.height, settings.frames)
            noise = comfy.sample.prepare_noise(latent, settings.seed + k)
            samples = comfy.sample.sample(
                patcher,
                noise,
                settings.steps,
                settings.cfg,
                settings.sampler,
                settings.scheduler,
                positive,
                settings.negative,
                latent,
                seed=settings.seed + k,
                disable_pbar=True,
            )
            with model_loading.as_comfyui_loads():  # the graph's own VAE: loaded as ComfyUI loads it
                decoded = settings.vae.decode(samples)
            frames = decoded.reshape(-1, *decoded.shape[-3:])[..., :3]  # video VAEs add a frame axis
            image = frames[:1]
            images.append(image.float().clamp(0, 1).cpu())
            path = _save_png(image[0], os.path.join(samples_dir, f"step_{step}_{k}.png"))
            if len(frames) > 1:  # a video: the animation beside its first frame, and shown instead of it
                path = _save_animation(frames, os.path.join(samples_dir, f"step_{step}_{k}.webp"))
            paths.append(path)
    return image_grid(images), paths


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
    """Tile (1,H,W,3) images into one (1,H',W',3) IMAGE, near-square, row-major."""
    columns = math.ceil(math.sqrt(len(images)))
    rows = math.ceil(len(images) / columns)
    height, width = images[0].shape[1:3]
    grid = torch.zeros(1, rows * height, columns * width, 3)
    for i, image in enumerate(images):
        r, c = divmod(i, columns)
        grid[0, r * height : (r + 1) * height, c * width : (c + 1) * width] = image[0, :height, :width]
    return grid
