"""The tiny stacks of the image families ComfyUI 0.2x added (Kandinsky 5 Image, LongCat-Image,
ERNIE-Image, Anima) are ComfyUI's own classes: the model config, model, transformer, text encoders
and tokenizers each family loads, real vocabularies, the family's latent channels, weights that
ComfyUI's model detection reads back as the family, and text → extra_conds → transformer end to end.
On a host without these classes every test is skipped with that reason."""

import importlib
import os

import comfy.model_detection
import numpy as np
import pytest
import torch
from PIL import Image

from devkit import tiny_models  # first: it imports tiny_recent_image once its helpers exist
from devkit.tiny_models import build_tiny, family_params
from eridiffusion.comfy_compat import register_fused_rope_backwards
from eridiffusion.training.model.inputs import batch_inputs, model_inputs

PROMPT = "a photo of sks dog"


def _host(path):
    """A class of the host by dotted path ("comfy.ldm.ernie.model.ErnieImageModel"): older hosts lack
    these modules, so they are looked up only in tests that run."""
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


# family: model config, model, transformer, text-encoder model, tokenizer, VAE model
STACKS = {
    "kandinsky5_image": (
        "comfy.supported_models.Kandinsky5Image",
        "comfy.model_base.Kandinsky5Image",
        "comfy.ldm.kandinsky5.model.Kandinsky5",
        "comfy.text_encoders.kandinsky5.Kandinsky5TEModel",
        "comfy.text_encoders.kandinsky5.Kandinsky5TokenizerImage",
        "comfy.taesd.taesd.TAESD",
    ),
    "longcat_image": (
        "comfy.supported_models.LongCatImage",
        "comfy.model_base.LongCatImage",
        "comfy.ldm.flux.model.Flux",
        "comfy.text_encoders.longcat_image.LongCatImageTEModel",
        "comfy.text_encoders.longcat_image.LongCatImageTokenizer",
        "comfy.taesd.taesd.TAESD",
    ),
    "ernie_image": (
        "comfy.supported_models.ErnieImage",
        "comfy.model_base.ErnieImage",
        "comfy.ldm.ernie.model.ErnieImageModel",
        "comfy.text_encoders.ernie.ErnieTEModel",
        "comfy.text_encoders.ernie.ErnieTokenizer",
        "comfy.taesd.taesd.TAESD",
    ),
    "anima": (
        "comfy.supported_models.Anima",
        "comfy.model_base.Anima",
        "comfy.ldm.anima.model.Anima",
        "comfy.text_encoders.anima.AnimaTEModel",
        "comfy.text_encoders.anima.AnimaTokenizer",
        "comfy.ldm.wan.vae.WanVAE",
    ),
}

# family: {encoder attribute of the text-encoder model: (its class, its transformer class, vocabulary)}
ENCODERS = {
    "kandinsky5_image": {
        "qwen25_7b": (
            "comfy.text_encoders.kandinsky5.Qwen25_7BVLIModel",
            "comfy.text_encoders.llama.Qwen25_7BVLI",
            152064,
        ),
        "clip_l": ("comfy.sd1_clip.SDClipModel", None, 49408),
    },
    "longcat_image": {
        "qwen25_7b": (
            "comfy.text_encoders.qwen_image.Qwen25_7BVLIModel",
            "comfy.text_encoders.llama.Qwen25_7BVLI",
            152064,
        )
    },
    "ernie_image": {
        "ministral3_3b": (
            "comfy.text_encoders.ernie.Ministral3_3BModel",
            "comfy.text_encoders.llama.Ministral3_3B",
            131072,
        )
    },
    "anima": {"qwen3_06b": ("comfy.text_encoders.anima.Qwen3_06BModel", "comfy.text_encoders.llama.Qwen3_06B", 151936)},
}

# What comfy.model_detection reads from each tiny diffusion model's own weights: the family's branch
# and the sizes by which supported_models tells it from its neighbours.
DETECTED = {
    "kandinsky5_image": {
        "image_model": "kandinsky5",
        "model_dim": 2560,
        "visual_embed_dim": 64,
        "num_visual_blocks": 2,
        "num_text_blocks": 2,
    },
    "longcat_image": {
        "image_model": "flux",
        "context_in_dim": 3584,
        "vec_in_dim": None,
        "guidance_embed": False,
        "txt_ids_dims": [1, 2],
        "depth": 2,
        "depth_single_blocks": 2,
    },
    "ernie_image": {"image_model": "ernie"},
    "anima": {"image_model": "anima", "model_channels": 64, "in_channels": 16},
}
# the family's latent channels as the tiny VAE gives them: ERNIE-Image's 128 are FLUX.2's packed
# 2x2 patches of TAEF2's 32 (tiny_recent_image.tiny_ernie_image)
LATENT_CHANNELS = {"kandinsky5_image": 16, "longcat_image": 16, "ernie_image": 32, "anima": 16}


def test_every_recent_image_family_is_registered():
    assert sorted(tiny_models.tiny_recent_image.FAMILIES) == sorted(STACKS)


@pytest.fixture(scope="module", params=family_params(sorted(STACKS)))
def stack(request):
    return request.param, build_tiny(request.param, seed=0)


def test_stack_pieces_are_the_comfyui_classes_the_family_loads(stack):
    name, (model, clip, vae) = stack
    config_class, model_class, transformer_class, te_class, tokenizer_class, vae_class = map(_host, STACKS[name])
    assert type(model.model.model_config) is config_class
    assert type(model.model) is model_class
    assert type(model.model.diffusion_model) is transformer_class
    assert isinstance(clip.cond_stage_model, te_class)  # clip_target's te() subclasses it per checkpoint dtype
    assert type(clip.tokenizer) is tokenizer_class
    assert type(vae.first_stage_model) is vae_class


def test_text_encoders_are_the_real_classes_with_real_vocabularies(stack):
    name, (_, clip, _) = stack
    for attribute, (encoder_class, transformer_class, vocabulary) in ENCODERS[name].items():
        encoder = getattr(clip.cond_stage_model, attribute)
        assert type(encoder) is _host(encoder_class), attribute
        if transformer_class is not None:
            assert type(encoder.transformer) is _host(transformer_class), attribute
        assert encoder.transformer.get_input_embeddings().weight.shape[0] == vocabulary, attribute


def test_vae_gives_the_family_latent_channels(stack, datasets_dir):
    name, (model, _, vae) = stack
    image = Image.open(os.path.join(datasets_dir, "dreambooth_dog", "00.jpg")).convert("RGB").resize((64, 64))
    with torch.inference_mode():
        latent = vae.encode(torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0)[None])
    assert model.model.latent_format.latent_channels == LATENT_CHANNELS[name]
    assert latent.shape[1] == LATENT_CHANNELS[name]
    assert tuple(latent.shape[-2:]) == (8, 8)


def test_comfyui_model_detection_reads_the_weights_as_the_family(stack):
    name, (model, _, _) = stack
    state_dict = model.model.diffusion_model.state_dict()
    detected = comfy.model_detection.detect_unet_config(state_dict, "")
    assert {key: detected.get(key) for key in DETECTED[name]} == DETECTED[name]
    assert type(comfy.model_detection.model_config_from_unet_config(detected, state_dict)) is _host(STACKS[name][0])


def _latent(model):
    fmt = model.model.latent_format
    shape = (1, fmt.latent_channels) + (1,) * (fmt.latent_dimensions == 3) + (16, 16)  # 128 px
    return torch.randn(shape, generator=torch.Generator().manual_seed(0))


def _apply(model, conditioning, latent):
    base = model.model
    inputs = batch_inputs([model_inputs(base, conditioning, latent[0], "cpu", (128, 128))])
    return inputs, base.apply_model(latent, torch.tensor([0.5]), **inputs)


def test_prompt_runs_through_extra_conds_into_the_transformer(stack):
    _, (model, clip, _) = stack
    latent = _latent(model)
    with torch.inference_mode():
        conditioning = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
        _, out = _apply(model, conditioning, latent)
    assert out.shape == latent.shape
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", family_params(["anima"]))
def test_anima_runs_its_llm_adapter_in_the_training_forward_as_the_sampler_does_in_extra_conds(name):
    # Outside inference mode Anima's extra_conds hands the T5 ids to the forward, which runs the LLM adapter
    # there (so its adapters get gradients); the sampler's path runs it in extra_conds. Same output.
    model, clip, _ = build_tiny(name, seed=0)
    latent = _latent(model)
    with torch.inference_mode():
        conditioning = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
        sampler_inputs, sampled = _apply(model, conditioning, latent)
    training_inputs, trained = _apply(model, conditioning, latent)
    assert "t5xxl_ids" in training_inputs and "t5xxl_ids" not in sampler_inputs
    assert training_inputs["t5xxl_ids"].shape[-1] == len(clip.tokenize(PROMPT)["t5xxl"][0])
    assert sampler_inputs["c_crossattn"].shape[1:] == (512, 1024)  # padded adapter output, not Qwen3's states
    assert (trained.detach() - sampled).abs().max() < 1e-5


def _has_fused_rms_rope():
    return hasattr(torch.ops.comfy_kitchen, "rms_rope_split_half")


@pytest.mark.skipif(not _has_fused_rms_rope(), reason="this host has no comfy_kitchen fused RMSNorm + RoPE op")
@pytest.mark.filterwarnings("ignore:Input #")  # gradcheck's advice to use float64
def test_comfy_kitchens_fused_rms_norm_rope_gets_the_right_backward():
    # Cosmos-Predict2's attention (Anima) always calls this kernel; comfy_compat gives it a backward,
    # checked here against finite differences of its forward (float32: the kernels take no float64).
    register_fused_rope_backwards()
    generator = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 3, 2, 8, generator=generator, dtype=torch.float32).requires_grad_() for _ in range(2))
    freqs = torch.randn(1, 3, 1, 4, 2, 2, generator=generator, dtype=torch.float32)
    scale = torch.rand(8, generator=generator, dtype=torch.float32) + 0.5
    op = torch.ops.comfy_kitchen.rms_rope_split_half
    assert torch.autograd.gradcheck(
        lambda a, b: op(a, b, freqs, scale, scale, 1e-6), (q, k), eps=1e-2, atol=2e-3, rtol=1e-2
    )
