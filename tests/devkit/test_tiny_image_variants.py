"""The tiny stacks of the 2026 image variants (Chroma Radiance, Z-Image pixel space, Boogu, Lens,
PixelDiT) are ComfyUI's own classes: the model config, model, transformer, text encoder, tokenizer
and VAE each loads, and the pixel-space ones get ComfyUI's pixel-space VAE, which hands images
through unchanged (as 3-channel latents in [-1, 1]). On a host without these classes every test is
skipped with that reason."""

import importlib

import pytest
import torch

from devkit import tiny_models  # noqa: F401  (first: it imports tiny_image_variants once its helpers exist)
from devkit.tiny_models import build_tiny, family_params


def _host(path):
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


# family: model config, model, transformer, text-encoder model, tokenizer, VAE model
STACKS = {
    "chroma_radiance": (
        "comfy.supported_models.ChromaRadiance",
        "comfy.model_base.ChromaRadiance",
        "comfy.ldm.chroma_radiance.model.ChromaRadiance",
        "comfy.text_encoders.pixart_t5.PixArtT5XXL",
        "comfy.text_encoders.pixart_t5.PixArtTokenizer",
        "comfy.pixel_space_convert.PixelspaceConversionVAE",
    ),
    "z_image_pixel_space": (
        "comfy.supported_models.ZImagePixelSpace",
        "comfy.model_base.ZImagePixelSpace",
        "comfy.ldm.lumina.model.NextDiTPixelSpace",
        "comfy.text_encoders.z_image.ZImageTEModel",
        "comfy.text_encoders.z_image.ZImageTokenizer",
        "comfy.pixel_space_convert.PixelspaceConversionVAE",
    ),
    "boogu": (
        "comfy.supported_models.Boogu",
        "comfy.model_base.Boogu",
        "comfy.ldm.boogu.model.BooguTransformer2DModel",
        "comfy.text_encoders.boogu.BooguTEModel",
        "comfy.text_encoders.boogu.BooguTokenizer",
        "comfy.taesd.taesd.TAESD",
    ),
    "lens": (
        "comfy.supported_models.Lens",
        "comfy.model_base.Lens",
        "comfy.ldm.lens.model.LensTransformer2DModel",
        "comfy.text_encoders.gpt_oss.LensTEModel",
        "comfy.text_encoders.gpt_oss.LensTokenizer",
        "comfy.taesd.taesd.TAESD",
    ),
    "pixeldit": (
        "comfy.supported_models.PixelDiTT2I",
        "comfy.model_base.PixelDiTT2I",
        "comfy.ldm.pixeldit.model.PixDiT_T2I",
        "comfy.text_encoders.pixeldit.PixelDiTGemma2TE",
        "comfy.text_encoders.pixeldit.PixelDiTGemma2Tokenizer",
        "comfy.pixel_space_convert.PixelspaceConversionVAE",
    ),
}


@pytest.mark.parametrize("name", family_params(sorted(STACKS)))
def test_the_stack_is_comfyuis_own_classes(name):
    config_class, model_class, dit_class, te_class, tokenizer_class, vae_class = map(_host, STACKS[name])
    model, clip, vae = build_tiny(name)
    assert type(model.model.model_config) is config_class
    assert type(model.model) is model_class
    assert type(model.model.diffusion_model) is dit_class
    assert isinstance(clip.cond_stage_model, te_class)
    assert isinstance(clip.tokenizer, tokenizer_class)
    assert isinstance(vae.first_stage_model, vae_class)


@pytest.mark.parametrize("name", family_params(["chroma_radiance", "z_image_pixel_space", "pixeldit"]))
def test_a_pixel_space_stack_trains_on_the_pixels_themselves(name):
    model, _, vae = build_tiny(name)
    image = torch.rand(1, 64, 96, 3)
    latent = vae.encode(image)
    assert latent.shape == (1, model.model.latent_format.latent_channels, 64, 96)
    torch.testing.assert_close(latent, image.movedim(-1, 1) * 2 - 1)
    torch.testing.assert_close(vae.decode(latent), image)
