"""Image-to-video training (CacheLatents' start_image): each clip's first frame (a still: itself)
conditions it as ComfyUI's WanImageToVideo / HunyuanVideo15ImageToVideo set it, the model's output
follows that start image, and training teaches the model to follow it on clips it never saw. Tiny
stacks of ComfyUI's own classes (devkit/tiny_wan.py, devkit/tiny_hunyuan_video.py), clips made from
the real photos."""

import os

import comfy.model_management
import numpy as np
import pytest
import torch

from devkit.photo_clips import CLIP_FRAMES, start_photo
from devkit.short_runs import family_run, quick_samples
from devkit.stock_comfyui import relative_error
from devkit.tiny_clip_vision import tiny_clip_vision
from devkit.tiny_models import TINY_FAMILIES, build_tiny
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.data.buckets import fit_to_bucket
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.media import VideoOptions, read_clip
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.model.inputs import batch_inputs, model_inputs
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora

SIGMAS = (0.3, 0.5, 0.7, 0.9)


def _data(name, dataset, folder, start_image=True):
    model, clip, vae = build_tiny(name, seed=0)
    with torch.inference_mode():
        data = build_training_data(
            dataset, vae, clip, TINY_FAMILIES[name].resolution, str(folder), start_image=start_image
        )
    return model, vae, data


def _loss(patcher, sample, values, frames=slice(None)):
    """The model's mean squared x0 error on `sample`'s latent `frames` at SIGMAS (fixed noise),
    conditioned on `values`."""
    comfy.model_management.load_models_gpu([patcher], force_full_load=True)  # (its adapters go on with it)
    base = patcher.model
    x0 = base.process_latent_in(sample.latent[None].float())
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(3))
    inputs = batch_inputs([model_inputs(base, sample.conditionings[0], x0[0], "cpu", sample.bucket, values=values)])
    total = 0.0
    with torch.inference_mode():
        for value in SIGMAS:
            sigma = torch.tensor([value])
            x_t = base.model_sampling.noise_scaling(sigma, noise, x0)
            total += float((base.apply_model(x_t, sigma, **inputs) - x0)[:, :, frames].square().mean())
    return total / len(SIGMAS)


def _output(patcher, sample, values, sigma=0.7):
    comfy.model_management.load_models_gpu([patcher], force_full_load=True)
    base = patcher.model
    x0 = base.process_latent_in(sample.latent[None].float())
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(3))
    inputs = batch_inputs([model_inputs(base, sample.conditionings[0], x0[0], "cpu", sample.bucket, values=values)])
    with torch.inference_mode():
        x_t = base.model_sampling.noise_scaling(torch.tensor([sigma]), noise, x0)
        return base.apply_model(x_t, torch.tensor([sigma]), **inputs)


@pytest.fixture(scope="module")
def wan22_i2v(dog_clips, tmp_path_factory):
    """The tiny Wan 2.2 I2V 14B stack, the clips with one held back, and a training run on the others."""
    folder = tmp_path_factory.mktemp("i2v")
    # mirrored copies too: each caption then opens two clips, told apart by their start images alone
    dataset = load_dataset(dog_clips.folder, frames=CLIP_FRAMES, fps=16.0, validation=0.2, flip=True)
    model, vae, data = _data("wan22_i2v_14b", dataset, folder / "cache")
    config = family_run("i2v", 300, rank=64)
    with torch.inference_mode(False):
        result = train_lora(model, data, config, str(folder / "run"))
    return {"model": model, "vae": vae, "data": data, "result": result}


def test_each_clip_is_conditioned_on_its_first_frame_as_wan_image_to_video_sets_it(wan22_i2v):
    sample = wan22_i2v["data"].samples[0]
    values = sample.conditioning_values
    latent_frames = sample.latent.shape[1]
    assert tuple(values["concat_mask"].shape) == (1, 1, latent_frames, *sample.latent.shape[-2:])
    assert values["concat_mask"][:, :, 0].eq(0).all() and values["concat_mask"][:, :, 1:].eq(1).all()
    # the Wan VAE encodes the first frame alone: the clip's first latent frame is the start image's
    first_frame = values["concat_latent_image"][0, :, 0]
    assert (first_frame - sample.latent[:, 0]).abs().max() < 1e-4


def test_the_output_changes_with_the_start_image(wan22_i2v):
    samples, model = wan22_i2v["data"].samples, wan22_i2v["model"]
    own, other = (_output(model, samples[0], samples[k].conditioning_values) for k in (0, 2))
    assert relative_error(other, own) > 1e-2


def test_the_trained_model_follows_the_start_image_better_than_the_base_on_held_back_clips(wan22_i2v):
    held_back = wan22_i2v["data"].validation.samples[0]
    wrong = wan22_i2v["data"].samples[0].conditioning_values

    def gap(patcher):  # how much worse the held-back clip denoises from another clip's start image
        return _loss(patcher, held_back, wrong) - _loss(patcher, held_back, held_back.conditioning_values)

    base_gap, trained_gap = gap(wan22_i2v["model"]), gap(wan22_i2v["result"].patcher)
    assert trained_gap > 2 * max(base_gap, 0.0) and trained_gap > 0.01, (base_gap, trained_gap)


def test_a_still_is_its_own_start_image_of_one_frame(dog_dataset, tmp_path):
    records = dog_dataset.records[:1]
    dataset = type(dog_dataset)(dog_dataset.folder, records, dog_dataset.captions, 1)
    _, _, data = _data("hunyuan_video15_i2v", dataset, tmp_path)
    values = data.samples[0].conditioning_values
    assert data.samples[0].frames == 1
    assert tuple(values["concat_mask"].shape) == (1, 1, 1, *data.samples[0].latent.shape[-2:])
    assert values["concat_mask"].eq(0).all()
    assert torch.equal(values["concat_latent_image"][0], data.samples[0].latent)


def test_a_start_image_for_a_text_to_video_model_is_refused_before_training(dog_clips, tmp_path):
    model, _, data = _data("wan21_t2v", dog_clips, tmp_path / "cache")
    with torch.inference_mode(False), pytest.raises(EriDiffusionError, match="takes no start image"):
        train_lora(model, data, TrainConfig(steps=1, dtype="fp32", run_name="t2v"), str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run")


def test_a_sample_start_image_for_a_text_to_video_model_is_refused_before_training(dog_clips, tmp_path):
    model, vae, data = _data("wan21_t2v", dog_clips, tmp_path / "cache", start_image=False)
    clip = build_tiny("wan21_t2v", seed=0)[1]
    with torch.inference_mode():
        samples = quick_samples(clip, vae, "a photo of sks dog", 64, 64, frames=5, start_image=start_photo(64, 64))
    config = TrainConfig(steps=1, dtype="fp32", run_name="t2v")
    with torch.inference_mode(False), pytest.raises(EriDiffusionError, match="start_image is connected") as refused:
        train_lora(model, data, config, str(tmp_path / "run"), sample_settings=samples)
    assert "WAN21" in str(refused.value)
    assert not os.path.exists(tmp_path / "run")


def test_a_start_image_with_an_image_model_vae_is_refused_before_encoding(dog_dataset, tmp_path):
    _, clip, vae = build_tiny("sd15", seed=0)
    with torch.inference_mode(), pytest.raises(EriDiffusionError, match="start_image"):
        build_training_data(dog_dataset, vae, clip, 64, str(tmp_path), start_image=True)
    assert not os.path.exists(tmp_path / "latents")


@pytest.mark.parametrize(
    "name, kind, model_input", [("wan21_i2v", "wan", "clip_fea"), ("hunyuan_video15_i2v", "hunyuan", "clip_fea")]
)
def test_clip_vision_features_of_the_start_image_reach_the_model_as_the_i2v_node_sets_them(
    name, kind, model_input, dog_clips, tmp_path
):
    import nodes

    clip_vision = tiny_clip_vision(kind)
    model, clip, vae = build_tiny(name, seed=0)
    resolution = TINY_FAMILIES[name].resolution
    with torch.inference_mode():
        data = build_training_data(
            dog_clips, vae, clip, resolution, str(tmp_path), start_image=True, clip_vision=clip_vision
        )
        again = build_training_data(
            dog_clips, vae, clip, resolution, str(tmp_path), start_image=True, clip_vision=clip_vision
        )
        sample = data.samples[0]
        first = read_clip(dog_clips.records[0].path, VideoOptions(1, 16.0))[0]
        image = torch.from_numpy(np.asarray(fit_to_bucket(first, sample.bucket)[0], dtype=np.float32) / 255.0)[None]
        expected = nodes.CLIPVisionEncode().encode(clip_vision, image, "none")[0]
    vision = sample.conditioning_values["clip_vision_output"]
    assert torch.equal(vision.last_hidden_state, expected.last_hidden_state.float())
    assert torch.equal(
        again.samples[0].conditioning_values["clip_vision_output"].last_hidden_state, vision.last_hidden_state
    )
    assert again.stats.latents_encoded == 0  # (read back from the cache)
    without = {k: v for k, v in sample.conditioning_values.items() if k != "clip_vision_output"}
    assert model_input in model_inputs(
        model.model,
        sample.conditionings[0],
        model.model.process_latent_in(sample.latent[None])[0],
        "cpu",
        sample.bucket,
        values=sample.conditioning_values,
    )
    assert relative_error(_output(model, sample, without), _output(model, sample, sample.conditioning_values)) > 1e-3
