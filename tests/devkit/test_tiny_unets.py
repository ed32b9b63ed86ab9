"""The tiny UNet stacks beside SD1.5 and SDXL are ComfyUI's own classes for the class they stand for."""

import comfy.model_base
import comfy.sd
import comfy.sd1_clip
import comfy.sdxl_clip
import comfy.supported_models
import pytest

from devkit import tiny_models, tiny_unets

EXPECTED = {
    "sd20": (comfy.supported_models.SD20, comfy.model_base.BaseModel, "clip_h"),
    "sdxl_refiner": (comfy.supported_models.SDXLRefiner, comfy.model_base.SDXLRefiner, "clip_g"),
    "SD15_instructpix2pix": (
        comfy.supported_models.SD15_instructpix2pix,
        comfy.model_base.SD15_instructpix2pix,
        "clip_l",
    ),
    "SDXL_instructpix2pix": (
        comfy.supported_models.SDXL_instructpix2pix,
        comfy.model_base.SDXL_instructpix2pix,
        "clip_g",
    ),
}
BUILDERS = {**{name: tiny.build for name, tiny in tiny_unets.FAMILIES.items()}, **tiny_unets.GENERIC_STACKS}


def test_every_stack_of_this_module_is_checked_and_its_rows_are_registered():
    assert sorted(BUILDERS) == sorted(EXPECTED)
    assert all(tiny_models.TINY_FAMILIES[name] is tiny for name, tiny in tiny_unets.FAMILIES.items())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pieces_are_comfyuis_classes_for_the_class(name):
    config_class, base_class, encoder = EXPECTED[name]
    model, clip, vae = BUILDERS[name](0)
    assert type(model.model.model_config) is config_class
    assert type(model.model) is base_class
    assert hasattr(clip.cond_stage_model, encoder)
    assert isinstance(vae, comfy.sd.VAE)
    if name.endswith("instructpix2pix"):  # the edited image's latent beside the noisy one
        assert model.model.diffusion_model.input_blocks[0][0].in_channels == 8
