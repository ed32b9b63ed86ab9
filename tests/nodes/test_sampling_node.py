"""SampleDuringTraining's per-prompt settings as users reach them: through ComfyUI's executor, a
prompt line with its own negative, size, seed, steps and cfg renders what stock ComfyUI's
KSampler renders with those settings on the trained MODEL."""

import os
import shutil

import numpy as np
import pytest
from PIL import Image

from devkit.workflow import QUICK, load_extension, run_named, training_prompt, with_sampler

OWN = "a photo of sks dog --n blurry, lowres --w 96 --h 64 --seed 7 --steps 3 --cfg 2.5"


@pytest.fixture(scope="module")
def registered():
    return load_extension()


@pytest.fixture(scope="module")
def two_photos(datasets_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("sampling_node_photos")
    for name in ("00", "01"):
        for ext in (".jpg", ".txt"):
            shutil.copy(os.path.join(datasets_dir, "dreambooth_dog", name + ext), folder)
    return folder


def _stock_render(prompt, node_id, seed, prefix):
    """Stock nodes on the trainer's MODEL: CLIPTextEncode ×2 → EmptyLatentImage 96×64 → KSampler
    (seed `seed`, 3 steps, cfg 2.5) → VAEDecode → SaveImage(`prefix`)."""
    base = int(node_id)
    prompt[str(base)] = {"class_type": "CLIPTextEncode", "inputs": {"clip": ["1", 1], "text": "a photo of sks dog"}}
    prompt[str(base + 1)] = {"class_type": "CLIPTextEncode", "inputs": {"clip": ["1", 1], "text": "blurry, lowres"}}
    prompt[str(base + 2)] = {"class_type": "EmptyLatentImage", "inputs": {"width": 96, "height": 64, "batch_size": 1}}
    prompt[str(base + 3)] = {
        "class_type": "KSampler",
        "inputs": {
            "model": ["4", 0],
            "seed": seed,
            "steps": 3,
            "cfg": 2.5,
            "sampler_name": "euler",
            "scheduler": "normal",
            "positive": [str(base), 0],
            "negative": [str(base + 1), 0],
            "latent_image": [str(base + 2), 0],
            "denoise": 1.0,
        },
    }
    prompt[str(base + 4)] = {"class_type": "VAEDecode", "inputs": {"samples": [str(base + 3), 0], "vae": ["1", 2]}}
    prompt[str(base + 5)] = {
        "class_type": "SaveImage",
        "inputs": {"images": [str(base + 4), 0], "filename_prefix": prefix},
    }


def _pixels(path):
    return np.asarray(Image.open(path).convert("RGB"), dtype=np.int16)


def test_a_prompt_with_its_own_negative_size_and_seed_renders_as_stock_ksampler_does_with_them(
    registered, two_photos, comfy_dirs
):
    run_name = "sample_prompt_settings"
    prompt = training_prompt(two_photos, {**QUICK, "run_name": run_name})
    with_sampler(prompt, prompts=f"{OWN}\na photo of a dog", width=64, height=128, seed=3, steps=2, cfg=1.0)
    _stock_render(prompt, 20, 7, "stock_seed7")
    _stock_render(prompt, 30, 8, "stock_seed8")
    outcome = run_named(prompt, run_name)
    assert outcome.success, outcome.error
    samples = os.path.join(outcome.run_dir, "samples")
    own, shared = _pixels(os.path.join(samples, "step_2_0.png")), _pixels(os.path.join(samples, "step_2_1.png"))
    assert own.shape == (64, 96, 3) and shared.shape == (128, 64, 3)
    seed7 = _pixels(os.path.join(comfy_dirs["output"], "stock_seed7_00001_.png"))
    seed8 = _pixels(os.path.join(comfy_dirs["output"], "stock_seed8_00001_.png"))
    assert np.abs(own - seed7).max() <= 1
    assert np.abs(own - seed8).mean() > 5  # another seed draws another image
