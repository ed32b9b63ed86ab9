"""What the tests of the tiny stacks share: a family's stack built once per test module, a video
family's clip of a real photo encoded once, and a prompt's conditioning run through a stack's model."""

import gc
import os

import numpy as np
import pytest
import torch
from PIL import Image

from devkit.tiny_models import TINY_FAMILIES, build_tiny
from eridiffusion.training.model.inputs import batch_inputs, model_inputs

PROMPT = "a photo of sks dog"
VIDEO_SIZE = 128


@pytest.fixture(scope="module")
def stack_of():
    """A family's tiny stack (seed 0) by name: (ModelPatcher, CLIP, VAE), built once per test module."""
    built = {}

    def stack(name):
        if name not in built:
            built[name] = build_tiny(name, seed=0)
        return built[name]

    yield stack
    built.clear()  # while ComfyUI's modules still exist (its patchers' finalizers need them)
    gc.collect()


def _photo_pan(datasets_dir, count):
    size = VIDEO_SIZE
    photo = Image.open(os.path.join(datasets_dir, "dreambooth_dog", "00.jpg")).convert("RGB").resize((size + 32,) * 2)
    pixels = np.asarray(photo, dtype=np.float32) / 255.0
    return torch.from_numpy(np.stack([pixels[4 * i : 4 * i + size, 2 * i : 2 * i + size] for i in range(count)]))


@pytest.fixture(scope="module")
def video_stack_of(stack_of, datasets_dir):
    """(name, model, clip, vae, frames, latent, conditioning) of a video family by name: its stack, a
    slow pan over a real photo as many frames long as the family trains on, their latent and the
    prompt's conditioning, made once per test module."""
    made = {}

    def stack(name):
        if name not in made:
            model, clip, vae = stack_of(name)
            frames = _photo_pan(datasets_dir, TINY_FAMILIES[name].video_frames)
            with torch.inference_mode():
                latent = vae.encode(frames)
                cond = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
            made[name] = (name, model, clip, vae, frames, latent, cond)
        return made[name]

    yield stack
    made.clear()


def _apply(model, conditioning, latent):
    base = model.model
    width, height = latent.shape[-1] * 8, latent.shape[-2] * 8
    inputs = batch_inputs([model_inputs(base, conditioning, latent[0], "cpu", (width, height))])
    return inputs, base.apply_model(latent, torch.tensor([0.5]), **inputs)


@pytest.fixture
def apply_model():
    """(model inputs, output) of a stack's model on `latent` (one, at 8 px a latent pixel) at t=0.5
    under `conditioning`: through its extra_conds into the diffusion model, as training runs it."""
    return _apply


def _video_inputs(model, latent, cond):
    base = model.model
    x = base.process_latent_in(latent.float())
    return x, batch_inputs([model_inputs(base, cond, x[0], "cpu", (VIDEO_SIZE, VIDEO_SIZE))])


def _latent(model):
    fmt = model.model.latent_format
    shape = (1, fmt.latent_channels) + (1,) * (fmt.latent_dimensions == 3) + (16, 16)  # 128 px
    return torch.randn(shape, generator=torch.Generator().manual_seed(0))


@pytest.fixture
def latent_of():
    """A random latent (seed 0) of a 128 px image in a stack's latent format."""
    return _latent


@pytest.fixture
def video_inputs():
    """(model-space latent, model inputs) of a video stack's latent and conditioning."""
    return _video_inputs


@pytest.fixture
def dog_photo(datasets_dir):
    """A real photo as a batch of one image of `size` x `size` pixels in [0, 1]."""

    def load(size=128):
        image = Image.open(os.path.join(datasets_dir, "dreambooth_dog", "00.jpg")).convert("RGB").resize((size, size))
        return torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0)[None]

    return load
