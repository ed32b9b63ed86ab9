"""The tiny Flux-family and SD3 stacks are ComfyUI's own classes: model config, diffusion model,
text encoders and tokenizers as ComfyUI loads them for each family, and a VAE whose latents the
diffusion model takes."""

import os

import comfy.ldm.chroma.model
import comfy.ldm.flux.model
import comfy.ldm.modules.diffusionmodules.mmdit
import comfy.model_base
import comfy.sd
import comfy.supported_models
import comfy.taesd.taesd
import comfy.text_encoders.flux
import comfy.text_encoders.pixart_t5
import comfy.text_encoders.sd3_clip
import numpy as np
import pytest
import torch
from PIL import Image

from devkit import paths, tiny_flux
from eridiffusion.training.model.inputs import batch_inputs, model_inputs

PROMPT = "a photo of sks dog"
# family: (model config class, BaseModel class, diffusion model class, text encoder class, tokenizer class,
#          VAE latent channels)
EXPECTED = {
    "sd3": (
        comfy.supported_models.SD3,
        comfy.model_base.SD3,
        comfy.ldm.modules.diffusionmodules.mmdit.OpenAISignatureMMDITWrapper,
        comfy.text_encoders.sd3_clip.SD3ClipModel,
        comfy.text_encoders.sd3_clip.SD3Tokenizer,
        16,
    ),
    "flux_dev": (
        comfy.supported_models.Flux,
        comfy.model_base.Flux,
        comfy.ldm.flux.model.Flux,
        comfy.text_encoders.flux.FluxClipModel,
        comfy.text_encoders.flux.FluxTokenizer,
        16,
    ),
    "flux_schnell": (
        comfy.supported_models.FluxSchnell,
        comfy.model_base.Flux,
        comfy.ldm.flux.model.Flux,
        comfy.text_encoders.flux.FluxClipModel,
        comfy.text_encoders.flux.FluxTokenizer,
        16,
    ),
    "flux_kontext": (
        comfy.supported_models.Flux,
        comfy.model_base.Flux,
        comfy.ldm.flux.model.Flux,
        comfy.text_encoders.flux.FluxClipModel,
        comfy.text_encoders.flux.FluxTokenizer,
        16,
    ),
    "chroma": (
        comfy.supported_models.Chroma,
        comfy.model_base.Chroma,
        comfy.ldm.chroma.model.Chroma,
        comfy.text_encoders.pixart_t5.PixArtT5XXL,
        comfy.text_encoders.pixart_t5.PixArtTokenizer,
        16,
    ),
    "flux2": (
        comfy.supported_models.Flux2,
        comfy.model_base.Flux2,
        comfy.ldm.flux.model.Flux,
        comfy.text_encoders.flux.Flux2TEModel,
        comfy.text_encoders.flux.Flux2Tokenizer,
        32,
    ),
}
_STACKS = {}


def _stack(name):
    if name not in _STACKS:
        _STACKS[name] = tiny_flux.FAMILIES[name].build(0)
    return _STACKS[name]


@pytest.fixture(params=sorted(EXPECTED))
def family(request):
    return request.param, _stack(request.param)


def _photo(datasets_dir, size=128):
    image = Image.open(os.path.join(datasets_dir, "dreambooth_dog", "00.jpg")).convert("RGB").resize((size, size))
    return torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0)[None]


def test_every_family_of_this_module_is_checked():
    assert sorted(tiny_flux.FAMILIES) == sorted(EXPECTED)


def test_pieces_are_comfyuis_classes_for_the_family(family):
    name, (model, clip, vae) = family
    config_class, base_class, dit_class, te_class, tokenizer_class, _ = EXPECTED[name]
    assert type(model.model.model_config) is config_class
    assert type(model.model) is base_class
    assert type(model.model.diffusion_model) is dit_class
    assert isinstance(clip.cond_stage_model, te_class)
    assert isinstance(clip.tokenizer, tokenizer_class)
    assert isinstance(vae, comfy.sd.VAE) and isinstance(vae.first_stage_model, comfy.taesd.taesd.TAESD)


def test_vae_latents_have_the_family_channels_and_the_model_takes_them(family, datasets_dir):
    name, (model, clip, vae) = family
    channels = EXPECTED[name][5]
    assert vae.latent_channels == channels
    with torch.inference_mode():
        latent = vae.encode(_photo(datasets_dir))
        assert tuple(latent.shape) == (1, channels, 16, 16)
        base = model.model
        x = base.process_latent_in(latent)
        cond = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
        inputs = batch_inputs([model_inputs(base, cond, x[0], "cpu", (128, 128))])
        out = base.apply_model(x, torch.tensor([0.5]), **inputs)
    assert out.shape == latent.shape
    assert torch.isfinite(out).all()


@pytest.mark.parametrize(
    "name, guidance_embed", [("flux_dev", True), ("flux_kontext", True), ("flux_schnell", False), ("flux2", True)]
)
def test_guidance_embedding_as_the_real_model_has_it(name, guidance_embed):
    model, _, _ = _stack(name)
    dit = model.model.diffusion_model
    assert dit.params.guidance_embed is guidance_embed
    assert isinstance(dit.guidance_in, torch.nn.Identity) is not guidance_embed


def test_sd3_has_the_sd35_layout_and_all_three_text_encoders():
    model, clip, _ = _stack("sd3")
    dit = model.model.diffusion_model
    assert [hasattr(b.x_block, "attn2") for b in dit.joint_blocks] == [True, False]  # x_block_self_attn_layers
    assert type(dit.joint_blocks[0].context_block.attn.ln_q).__name__ == "RMSNorm"  # qk_norm "rms"
    te = clip.cond_stage_model
    assert te.clip_l is not None and te.clip_g is not None and te.t5xxl is not None
    cond = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
    # 77 CLIP tokens (l and g side by side, padded to T5's width) followed by 77 T5 tokens
    assert tuple(cond[0][0].shape) == (1, 154, 4096)
    assert tuple(cond[0][1]["pooled_output"].shape) == (1, 96)


def test_sd3_pos_embed_is_the_sincos_table_not_uninitialised_memory():
    model, _, _ = _stack("sd3")
    dit = model.model.diffusion_model
    size = tiny_flux.SD3_POS_EMBED_MAX
    table = comfy.ldm.modules.diffusionmodules.mmdit.get_2d_sincos_pos_embed_torch(dit.hidden_size, size, size)
    assert tuple(dit.pos_embed.shape) == (1, size * size, dit.hidden_size)
    assert torch.equal(dit.pos_embed[0], table)


def test_flux2_tokenizer_keeps_comfyuis_system_prompt_template():
    _, clip, _ = _stack("flux2")
    tokens = clip.tokenize(PROMPT)["mistral3_24b"][0]
    inner = clip.tokenizer.mistral3_24b.tokenizer
    text = inner.decode([t for t, _ in tokens])
    assert text.startswith("<|begin_of_text|>[SYSTEM_PROMPT]You are an AI that reasons about image descriptions.")
    assert text.endswith("[INST]a photo of sks dog[/INST]")
    assert max(t for t, _ in tokens) < tiny_flux.LLAMA3_VOCAB


def test_flux2_text_encoder_stacks_three_hidden_states():
    _, clip, _ = _stack("flux2")
    cond = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
    assert clip.cond_stage_model.mistral3_24b.num_layers == tiny_flux.MISTRAL3_LAYERS
    assert cond[0][0].shape[-1] == 3 * tiny_flux.MISTRAL3["hidden_size"]


def test_flux2_vae_is_the_pretrained_taef2(datasets_dir):
    _, _, vae = _stack("flux2")
    weights = torch.load(os.path.join(paths.taef2_weights(), "taef2_decoder.pth"), weights_only=True)
    assert torch.equal(vae.first_stage_model.taesd_decoder[1].weight, weights["1.weight"])
    photo = _photo(datasets_dir, 256)
    with torch.inference_mode():
        decoded = vae.decode(vae.encode(photo))
    mse = float((decoded.clamp(0, 1) - photo).square().mean())
    assert mse < 0.05  # a random TAESD gives ~0.1-0.3; the README measured 0.024
