"""The model section: ComfyUI's loaders on the files it names, and the family check."""

import pytest
import safetensors.torch
import torch

from eridiffusion.errors import EriDiffusionError
from eridiffusion.headless.models import ModelSource, check_model_files, load_models, load_vae, model_family


@pytest.fixture(scope="module")
def tiny_sdxl():
    return load_models(ModelSource(checkpoint="tiny-sdxl"))


@pytest.mark.parametrize("arch", ["sdxl", "SDXL"])
def test_arch_by_ai_toolkit_name_or_comfyui_class_accepts_the_family_comfyui_detects(tiny_sdxl, arch):
    assert model_family(tiny_sdxl[0], ModelSource(checkpoint="tiny-sdxl", arch=arch)).name == "SDXL"


def test_arch_of_another_family_is_an_error_naming_what_the_file_is(tiny_sdxl):
    with pytest.raises(
        EriDiffusionError, match=r"model.arch is 'flux', but tiny-sdxl loads as ComfyUI's SDXL \(SDXL\)"
    ):
        model_family(tiny_sdxl[0], ModelSource(checkpoint="tiny-sdxl", arch="flux"))


def test_arch_that_names_no_family_is_an_error():
    with pytest.raises(EriDiffusionError, match=r"model.arch 'sdxxl' is not a model family name"):
        ModelSource(checkpoint="tiny-sdxl", arch="sdxxl")


def test_diffusion_model_without_text_encoders_and_vae_is_an_error():
    with pytest.raises(EriDiffusionError, match=r"model.diffusion_model needs model.text_encoders"):
        ModelSource(diffusion_model="/models/flux1-dev.safetensors")


def test_missing_model_file_is_an_error_naming_it(tmp_path):
    source = ModelSource(
        diffusion_model=str(tmp_path / "nothing.safetensors"), text_encoders=("t5.safetensors",), vae="ae.safetensors"
    )
    with pytest.raises(EriDiffusionError, match=r"model.diffusion_model .*nothing.safetensors does not exist"):
        check_model_files(source)


def test_file_comfyui_cannot_detect_is_an_error_naming_it(tmp_path):
    path = str(tmp_path / "junk.safetensors")
    safetensors.torch.save_file({"foo.weight": torch.zeros(3, 3)}, path)
    with pytest.raises(
        EriDiffusionError,
        match=r"ComfyUI could not load model.checkpoint .*junk.safetensors "
        r"\(ERROR: Could not detect model type",
    ):
        load_models(ModelSource(checkpoint=path))


def test_vae_file_loads_as_vaeloader_loads_it(tiny_sdxl, tmp_path):
    _, _, vae = tiny_sdxl
    path = str(tmp_path / "tiny_taesd.safetensors")
    safetensors.torch.save_file({k: v.contiguous() for k, v in vae.first_stage_model.state_dict().items()}, path)
    image = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(load_vae(path).encode(image), vae.encode(image))
