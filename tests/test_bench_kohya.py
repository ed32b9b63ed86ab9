"""bench/kohya_sdxl_train.py's own files, without sd-scripts: the streamed safetensors writer the SAI checkpoint is
written with, and the disk caches and dataset TOML in kohya's formats."""

import os

import numpy as np
import pytest
import safetensors.torch
import torch

from bench import kohya_sdxl_train


def test_streamed_safetensors_read_back_as_written(tmp_path):
    """Every tensor back with its name, shape, dtype and values (a 0-dim one, as the checkpoint's logit_scale,
    and an integer one too), the header's metadata kept."""
    generator = torch.Generator().manual_seed(0)
    tensors = {
        "b.weight": torch.randn(3, 5, generator=generator).to(torch.bfloat16),
        "a.logit_scale": torch.tensor(2.5, dtype=torch.bfloat16),
        "c.position_ids": torch.arange(7).expand(1, 7),
        "d.bias": torch.randn(4, generator=generator),
    }
    entries = [(k, tuple(v.shape), v.dtype, lambda v=v: v) for k, v in tensors.items()]
    path = str(tmp_path / "streamed.safetensors")
    kohya_sdxl_train.write_safetensors(path, entries, {"made_by": "test"})
    back = safetensors.torch.load_file(path)
    assert sorted(back) == sorted(tensors)
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape and torch.equal(back[k], v)
    with safetensors.safe_open(path, framework="pt") as f:
        assert f.metadata() == {"made_by": "test"}
    assert not os.path.exists(path + ".tmp")


def test_streamed_safetensors_refuses_a_tensor_of_another_shape(tmp_path):
    path = str(tmp_path / "wrong.safetensors")
    with pytest.raises(ValueError, match="expected"):
        kohya_sdxl_train.write_safetensors(path, [("x", (2, 2), torch.float32, lambda: torch.zeros(3))])
    assert not os.path.exists(path)


def test_the_caches_have_kohyas_names_keys_and_shapes(tmp_path):
    """The latents beside the image as <stem>_<W>x<H>_sdxl.npz with latents (4, H/8, W/8), original_size and
    crop_ltrb; the text encoders' outputs as <stem>_te_outputs.npz with hidden_state1 (77, 768), hidden_state2
    (77, 1280) and pool2 (1280,); the TOML repeats the one image."""
    toml_path = kohya_sdxl_train.write_dataset(str(tmp_path), resolution=256, repeats=16)
    images = tmp_path / "images"
    assert sorted(os.listdir(images)) == ["bench.png", "bench.txt", "bench_0256x0256_sdxl.npz", "bench_te_outputs.npz"]
    latents = np.load(images / "bench_0256x0256_sdxl.npz")
    assert latents["latents"].shape == (4, 32, 32) and latents["latents"].dtype == np.float32
    assert latents["original_size"].tolist() == [256, 256]
    assert latents["crop_ltrb"].tolist() == [0, 0, 256, 256]
    outputs = np.load(images / "bench_te_outputs.npz")
    assert {k: outputs[k].shape for k in outputs.files} == {
        "hidden_state1": (77, 768),
        "hidden_state2": (77, 1280),
        "pool2": (1280,),
    }
    tomllib = pytest.importorskip("tomllib")
    with open(toml_path, "rb") as f:
        config = tomllib.load(f)
    assert config["general"]["enable_bucket"] is False
    (dataset,) = config["datasets"]
    assert dataset["resolution"] == 256 and dataset["batch_size"] == 1
    assert dataset["subsets"] == [{"image_dir": str(images), "num_repeats": 16}]
