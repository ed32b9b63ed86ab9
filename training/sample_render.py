"""Rendering sample images from the model being trained, with ComfyUI's own samplers."""
import math
import os
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

import comfy.sample

from .atomic_file import write_atomic


@dataclass(frozen=True)
class SampleSettings:
    """What SampleDuringTraining hands to the trainer: prompts already encoded by the graph's CLIP."""
    prompts: tuple                 # the prompt texts, for file names and logs
    positives: tuple               # one ComfyUI conditioning per prompt
    negative: list                 # the conditioning of the empty prompt
    vae: object
    every: int
    seed: int
    steps: int
    cfg: float
    sampler: str
    scheduler: str
    width: int
    height: int


def render_samples(patcher, settings, step, samples_dir):
    """Render every prompt on `patcher`; save step_<N>_<k>.png; return (grid IMAGE, paths)."""
    images, paths = [], []
    with torch.no_grad():
        for k, positive in enumerate(settings.positives):
            empty = torch.zeros(1, 4, settings.height // 8, settings.width // 8)
            latent = comfy.sample.fix_empty_latent_channels(patcher, empty)
            noise = comfy.sample.prepare_noise(latent, settings.seed + k)
            samples = comfy.sample.sample(patcher, noise, settings.steps, settings.cfg, settings.sampler,
                                          settings.scheduler, positive, settings.negative, latent,
                                          seed=settings.seed + k, disable_pbar=True)
            decoded = settings.vae.decode(samples)
            image = decoded.reshape(-1, *decoded.shape[-3:])[:1, ..., :3]  # video VAEs add a frame axis
            images.append(image.float().clamp(0, 1).cpu())
            paths.append(_save_png(image[0], os.path.join(samples_dir, f"step_{step}_{k}.png")))
    return image_grid(images), paths


def _save_png(image, path):
    pixels = (image.float().clamp(0, 1).cpu().numpy() * 255).round().astype(np.uint8)
    return write_atomic(path, lambda tmp: Image.fromarray(pixels).save(tmp, format="PNG"), overwrite=True)


def image_grid(images):
    """Tile (1,H,W,3) images into one (1,H',W',3) IMAGE, near-square, row-major."""
    columns = math.ceil(math.sqrt(len(images)))
    rows = math.ceil(len(images) / columns)
    height, width = images[0].shape[1:3]
    grid = torch.zeros(1, rows * height, columns * width, 3)
    for i, image in enumerate(images):
        r, c = divmod(i, columns)
        grid[0, r * height:(r + 1) * height, c * width:(c + 1) * width] = image[0, :height, :width]
    return grid
