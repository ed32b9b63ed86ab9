"""The tiny SD1.5/SDXL stacks behave like ComfyUI's loaded checkpoints: CLIPTextEncode, the UNet,
the VAE and KSampler's sampling all run on them."""

import os

import comfy.model_base
import comfy.model_patcher
import comfy.sample
import comfy.sd
import numpy as np
import pytest
import torch
from PIL import Image

from eridiffusion import tiny_models
from eridiffusion.errors import EriDiffusionError
from eridiffusion.tiny_models import TINY_BUILDERS

PROMPT = "a photo of sks dog"


@pytest.fixture(scope="module", params=TINY_BUILDERS)
def arch_stack(request):
    return request.param, tiny_models.build_tiny_demo(request.param, seed=0)


def _photo(datasets_dir, name, size=128):
    image = Image.open(os.path.join(datasets_dir, "dreambooth_dog", name)).convert("RGB").resize((size, size))
    return torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0)[None]


def _encode(clip, text):
    return clip.encode_from_tokens_scheduled(clip.tokenize(text))


def _model_kwargs(model, cond, batch_size, height, width):
    """What the sampler hands apply_model for one cond: context plus the model's extra conds (SDXL's y)."""
    extra = model.model.extra_conds(
        pooled_output=cond[0][1]["pooled_output"],
        cross_attn=cond[0][0],
        width=width,
        height=height,
        device=torch.device("cpu"),
    )
    return {name: c.process_cond(batch_size=batch_size).cond for name, c in extra.items()}


def _state(model, clip, vae):
    return {
        **{f"unet.{k}": v for k, v in model.model.diffusion_model.state_dict().items()},
        **{f"clip.{k}": v for k, v in clip.cond_stage_model.state_dict().items()},
        **{f"vae.{k}": v for k, v in vae.first_stage_model.state_dict().items()},
    }


def test_stack_is_comfyui_model_clip_and_4_channel_vae(arch_stack):
    arch, (model, clip, vae) = arch_stack
    expected = {"sd15": comfy.model_base.BaseModel, "sdxl": comfy.model_base.SDXL}[arch]
    assert type(model) is comfy.model_patcher.ModelPatcher and type(model.model) is expected
    assert isinstance(clip, comfy.sd.CLIP) and isinstance(vae, comfy.sd.VAE)
    assert vae.latent_channels == 4
    dtypes = {p.dtype for p in model.model.diffusion_model.parameters()}
    dtypes |= {p.dtype for p in clip.cond_stage_model.parameters()}
    assert dtypes == {torch.float32}


def test_tokenizer_is_comfyuis_real_clip_tokenizer(arch_stack):
    _, (_, clip, _) = arch_stack
    tokens = clip.tokenize(PROMPT)
    # <start> a photo of sks dog <end> in the real CLIP vocabulary
    assert [t for t, _ in tokens["l"][0][:7]] == [49406, 320, 1125, 539, 48136, 1929, 49407]


def test_cond_width_equals_unet_context_dim(arch_stack):
    arch, (model, clip, _) = arch_stack
    cond = _encode(clip, PROMPT)
    unet_config = model.model.model_config.unet_config
    assert len(cond) == 1
    assert tuple(cond[0][0].shape) == (1, 77, unet_config["context_dim"])
    pooled = cond[0][1]["pooled_output"]
    if arch == "sdxl":
        assert tuple(pooled.shape) == (1, tiny_models.CLIP_G["hidden_size"])
        assert unet_config["adm_in_channels"] == pooled.shape[1] + 1536
    else:
        assert tuple(pooled.shape) == (1, tiny_models.CLIP_L["hidden_size"])


def test_cond_depends_on_prompt(arch_stack):
    _, (_, clip, _) = arch_stack
    dog, cat = _encode(clip, PROMPT)[0][0], _encode(clip, "a cat on a sofa")[0][0]
    assert (dog - cat).abs().max().item() > 1e-3


def test_apply_model_returns_finite_latent_shape(arch_stack):
    arch, (model, clip, _) = arch_stack
    x = torch.randn(2, 4, 16, 16, generator=torch.Generator().manual_seed(1))
    kwargs = _model_kwargs(model, _encode(clip, PROMPT), x.shape[0], 128, 128)
    assert sorted(kwargs) == {"sd15": ["c_crossattn"], "sdxl": ["c_crossattn", "y"]}[arch]
    with torch.no_grad():
        out = model.model.apply_model(x, torch.tensor([1.0, 5.0]), **kwargs)
    assert out.shape == x.shape and torch.isfinite(out).all()
    assert (out - x).abs().max().item() > 1e-3


def test_last_unet_conv_is_initialised_not_zero(arch_stack):
    _, (model, _, _) = arch_stack
    weight = model.model.diffusion_model.out[2].weight
    fan_in = weight[0].numel()
    assert 0.9 * fan_in**-0.5 < weight.std().item() < 1.1 * fan_in**-0.5


def test_norm_weights_are_one_and_all_parameters_finite(arch_stack):
    _, (model, clip, vae) = arch_stack
    for module in (model.model, clip.cond_stage_model, vae.first_stage_model):
        for sub in module.modules():
            if isinstance(sub, (torch.nn.GroupNorm, torch.nn.LayerNorm)):
                assert torch.equal(sub.weight, torch.ones_like(sub.weight))
        assert all(torch.isfinite(p).all() for p in module.parameters())
        for p in module.parameters():  # no uninitialised memory: every matrix at its fan-in scale
            if p.dim() >= 2 and p.numel() >= 1024:
                assert 0.8 < p.std().item() * p[0].numel() ** 0.5 < 1.2


@pytest.mark.parametrize("arch", TINY_BUILDERS)
def test_same_seed_gives_bit_identical_weights(arch):
    first = _state(*tiny_models.build_tiny_demo(arch, seed=3))
    second = _state(*tiny_models.build_tiny_demo(arch, seed=3))
    assert first.keys() == second.keys()
    assert [k for k in first if not torch.equal(first[k], second[k])] == []


@pytest.mark.parametrize("arch", TINY_BUILDERS)
def test_different_seed_gives_different_weights(arch):
    seed0 = _state(*tiny_models.build_tiny_demo(arch, seed=0))
    seed1 = _state(*tiny_models.build_tiny_demo(arch, seed=1))
    # every randomly drawn tensor differs; only norm weights (all ones) and built-in scalars agree
    same = [k for k in seed0 if torch.equal(seed0[k], seed1[k])]
    assert all(seed0[k].dim() == 0 or torch.all(seed0[k] == 1) for k in same)
    assert not torch.equal(seed0["unet.out.2.weight"], seed1["unet.out.2.weight"])


def test_vae_encodes_real_photo_to_latent_and_decodes_to_image(arch_stack, datasets_dir):
    _, (_, _, vae) = arch_stack
    dog0, dog1 = _photo(datasets_dir, "00.jpg"), _photo(datasets_dir, "01.jpg")
    latent = vae.encode(torch.cat([dog0, dog1]))
    assert tuple(latent.shape) == (2, 4, 16, 16) and torch.isfinite(latent).all()
    assert (latent[0] - latent[1]).abs().max().item() > 1e-4
    image = vae.decode(latent)
    assert tuple(image.shape) == (2, 128, 128, 3)
    assert image.min().item() >= 0.0 and image.max().item() <= 1.0


def test_ksampler_sampling_runs(arch_stack):
    _, (model, clip, _) = arch_stack
    latent = torch.zeros(1, 4, 16, 16)
    noise = comfy.sample.prepare_noise(latent, seed=0)
    samples = comfy.sample.sample(
        model,
        noise,
        steps=2,
        cfg=2.0,
        sampler_name="euler",
        scheduler="normal",
        positive=_encode(clip, PROMPT),
        negative=_encode(clip, ""),
        latent_image=latent,
        disable_pbar=True,
        seed=0,
    )
    assert tuple(samples.shape) == (1, 4, 16, 16) and torch.isfinite(samples).all()
    assert samples.std().item() > 0.0


def test_build_tiny_names_the_known_architectures_on_a_typo():
    with pytest.raises(EriDiffusionError, match="'sd21'.*sd15.*sdxl"):
        tiny_models.build_tiny_demo("sd21")
