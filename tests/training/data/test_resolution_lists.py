"""A resolution list: one cache holds every image at each size in that size's buckets, batches of
every size train (never mixed within a batch), and bad lists are named before anything is encoded."""

import pytest
import torch

from devkit.tiny_models import build_tiny
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.data.batches import BatchSampler
from eridiffusion.training.data.training_data import CacheSettings, build_training_data
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora


@pytest.fixture(scope="module")
def two_sizes(dog_dataset, tmp_path_factory):
    model, clip, vae = build_tiny("sd15", seed=0)
    with torch.inference_mode():
        data = build_training_data(
            dog_dataset, vae, clip, 128, str(tmp_path_factory.mktemp("cache")), extra_resolutions=(64,)
        )
    return model, data


def test_every_image_is_cached_once_per_size_in_that_sizes_buckets(two_sizes, dog_dataset):
    _, data = two_sizes
    records = len(dog_dataset.records)
    assert len(data.samples) == 2 * records
    sides = sorted({max(s.bucket) for s in data.samples})
    assert sides == [64, 128]
    for sample in data.samples:
        assert tuple(sample.latent.shape[-2:]) == (sample.bucket[1] // 8, sample.bucket[0] // 8)
    assert data.stats.latents_encoded == 2 * records  # the size is part of each entry's key


def test_batches_interleave_sizes_and_never_mix_them(two_sizes):
    _, data = two_sizes
    sampler = BatchSampler(data, batch_size=2, seed=0)
    batches = [sampler.next() for _ in range(len(data.samples) // 2)]
    sizes = [{data.samples[i].bucket for i in batch} for batch in batches]
    assert all(len(s) == 1 for s in sizes)
    assert {max(next(iter(s))) for s in sizes} == {64, 128}


def test_batches_of_each_size_train(two_sizes, tmp_path):
    model, data = two_sizes
    seen = []
    hook = model.model.diffusion_model.register_forward_hook(lambda m, args, out: seen.append(tuple(out.shape[-2:])))
    config = TrainConfig(steps=8, learning_rate=1e-3, dtype="fp32", gradient_checkpointing=False, run_name="sizes")
    try:
        with torch.inference_mode(False):
            result = train_lora(model, data, config, str(tmp_path))
    finally:
        hook.remove()
    assert {max(shape) for shape in seen} == {8, 16}  # latents of the 64 and 128 px buckets
    assert len(result.losses) == 8 and all(torch.isfinite(torch.tensor(result.losses)))


@pytest.mark.parametrize(
    "extra, message",
    [
        ("512, big", r"extra_resolutions holds 'big'; write sizes of 64..4096 in steps of 64"),
        ("500", r"extra_resolutions holds 500, which must be a multiple of 64 \(got 500\): use 448 or 512"),
        ("8192", r"extra_resolutions holds 8192, which must be between 64 and 4096 \(got 8192\)"),
        ("1024", r"extra_resolutions lists 1024 twice \(resolution is 1024\)"),
        ("512 512", r"extra_resolutions lists 512 twice"),
    ],
)
def test_a_bad_resolution_list_is_an_error_naming_the_size(extra, message):
    with pytest.raises(EriDiffusionError, match=r"CacheLatents: " + message):
        CacheSettings(resolution=1024, extra_resolutions=extra)


def test_a_resolution_list_reads_as_its_sizes():
    assert CacheSettings(resolution=1024, extra_resolutions="512, 768").extras() == (512, 768)
