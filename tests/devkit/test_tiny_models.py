"""The tiny DiT stacks (HiDream, Lumina2, Z-Image, Qwen-Image, OmniGen2, HunyuanImage 2.1, AuraFlow,
PixArt) are ComfyUI's own classes: the model config, model, transformer, text encoders and
tokenizers each family loads, real vocabularies, the family's latent channels, a layout ComfyUI's
model detection recognises, and text → extra_conds → transformer runs end to end."""

import os

import comfy.ldm.aura.mmdit
import comfy.ldm.hidream.model
import comfy.ldm.hunyuan_video.model
import comfy.ldm.lumina.model
import comfy.ldm.omnigen.omnigen2
import comfy.ldm.pixart.pixartms
import comfy.ldm.qwen_image.model
import comfy.ldm.wan.vae
import comfy.model_base
import comfy.model_detection
import comfy.sd1_clip
import comfy.sdxl_clip
import comfy.supported_models as sm
import comfy.taesd.taesd
import comfy.text_encoders.aura_t5
import comfy.text_encoders.hidream
import comfy.text_encoders.hunyuan_image
import comfy.text_encoders.hunyuan_video
import comfy.text_encoders.llama
import comfy.text_encoders.lumina2
import comfy.text_encoders.omnigen2
import comfy.text_encoders.pixart_t5
import comfy.text_encoders.qwen_image
import comfy.text_encoders.sd3_clip
import comfy.text_encoders.t5
import comfy.text_encoders.z_image
import numpy as np
import pytest
import torch
from PIL import Image

from devkit import tiny_models  # first: it imports tiny_dit once its helpers exist
from devkit.tiny_models import build_tiny
from eridiffusion.training.model.inputs import batch_inputs, model_inputs

te = comfy.text_encoders
PROMPT = "a photo of sks dog"

# family: model config, model, transformer, text-encoder model, tokenizer, latent channels, VAE
STACKS = {
    "hidream": (
        sm.HiDream,
        comfy.model_base.HiDream,
        comfy.ldm.hidream.model.HiDreamImageTransformer2DModel,
        te.hidream.HiDreamTEModel,
        te.hidream.HiDreamTokenizer,
        16,
        comfy.taesd.taesd.TAESD,
    ),
    "lumina2": (
        sm.Lumina2,
        comfy.model_base.Lumina2,
        comfy.ldm.lumina.model.NextDiT,
        te.lumina2.LuminaModel,
        te.lumina2.LuminaTokenizer,
        16,
        comfy.taesd.taesd.TAESD,
    ),
    "z_image": (
        sm.ZImage,
        comfy.model_base.Lumina2,
        comfy.ldm.lumina.model.NextDiT,
        te.z_image.ZImageTEModel,
        te.z_image.ZImageTokenizer,
        16,
        comfy.taesd.taesd.TAESD,
    ),
    "qwen_image": (
        sm.QwenImage,
        comfy.model_base.QwenImage,
        comfy.ldm.qwen_image.model.QwenImageTransformer2DModel,
        te.qwen_image.QwenImageTEModel,
        te.qwen_image.QwenImageTokenizer,
        16,
        comfy.ldm.wan.vae.WanVAE,
    ),
    "omnigen2": (
        sm.Omnigen2,
        comfy.model_base.Omnigen2,
        comfy.ldm.omnigen.omnigen2.OmniGen2Transformer2DModel,
        te.omnigen2.Omnigen2Model,
        te.omnigen2.Omnigen2Tokenizer,
        16,
        comfy.taesd.taesd.TAESD,
    ),
    "hunyuan_image21": (
        sm.HunyuanImage21,
        comfy.model_base.HunyuanImage21,
        comfy.ldm.hunyuan_video.model.HunyuanVideo,
        te.hunyuan_image.HunyuanImageTEModel,
        te.hunyuan_image.HunyuanImageTokenizer,
        64,
        comfy.taesd.taesd.TAESD,
    ),
    "auraflow": (
        sm.AuraFlow,
        comfy.model_base.AuraFlow,
        comfy.ldm.aura.mmdit.MMDiT,
        te.aura_t5.AuraT5Model,
        te.aura_t5.AuraT5Tokenizer,
        4,
        comfy.taesd.taesd.TAESD,
    ),
    "pixart_alpha": (
        sm.PixArtAlpha,
        comfy.model_base.PixArt,
        comfy.ldm.pixart.pixartms.PixArtMS,
        te.pixart_t5.PixArtT5XXL,
        te.pixart_t5.PixArtTokenizer,
        4,
        comfy.taesd.taesd.TAESD,
    ),
    "pixart_sigma": (
        sm.PixArtSigma,
        comfy.model_base.PixArt,
        comfy.ldm.pixart.pixartms.PixArtMS,
        te.pixart_t5.PixArtT5XXL,
        te.pixart_t5.PixArtTokenizer,
        4,
        comfy.taesd.taesd.TAESD,
    ),
}

# family: {encoder attribute of the text-encoder model: (its class, its transformer class, vocabulary)}
ENCODERS = {
    "hidream": {
        "clip_l": (comfy.sd1_clip.SDClipModel, None, 49408),
        "clip_g": (comfy.sdxl_clip.SDXLClipG, None, 49408),
        "t5xxl": (te.sd3_clip.T5XXLModel, te.t5.T5, 32128),
        "llama": (te.hunyuan_video.LLAMAModel, te.llama.Llama2, 128256),
    },
    "lumina2": {"gemma2_2b": (te.lumina2.Gemma2_2BModel, te.llama.Gemma2_2B, 256000)},
    "z_image": {"qwen3_4b": (te.z_image.Qwen3_4BModel, te.llama.Qwen3_4B, 151936)},
    "qwen_image": {"qwen25_7b": (te.qwen_image.Qwen25_7BVLIModel, te.llama.Qwen25_7BVLI, 152064)},
    "omnigen2": {"qwen25_3b": (te.omnigen2.Qwen25_3BModel, te.llama.Qwen25_3B, 151936)},
    "hunyuan_image21": {
        "qwen25_7b": (te.hunyuan_image.Qwen25_7BVLIModel, te.llama.Qwen25_7BVLI, 152064),
        "byt5_small": (te.hunyuan_image.ByT5SmallModel, te.t5.T5, 1510),
    },
    "auraflow": {"pile_t5xl": (te.aura_t5.PT5XlModel, te.t5.T5, 32128)},
    "pixart_alpha": {"t5xxl": (te.pixart_t5.T5XXLModel, te.t5.T5, 32128)},
    "pixart_sigma": {"t5xxl": (te.pixart_t5.T5XXLModel, te.t5.T5, 32128)},
}

# What comfy.model_detection.detect_unet_config reads from each tiny state dict: the family's
# detection branch (image_model) and the layout it counts (blocks, patching, optional parts).
DETECTED = {
    "hidream": {"image_model": "hidream"},
    "lumina2": {"image_model": "lumina2", "n_layers": 2, "dim": 48, "cap_feat_dim": 32},
    "z_image": {"image_model": "lumina2", "n_layers": 2, "dim": 256, "cap_feat_dim": 32},
    "qwen_image": {"image_model": "qwen_image", "in_channels": 64, "num_layers": 2},
    "omnigen2": {"image_model": "omnigen2"},
    "hunyuan_image21": {
        "image_model": "hunyuan_video",
        "in_channels": 64,
        "out_channels": 64,
        "patch_size": [1, 1],
        "vec_in_dim": None,
        "byt5": True,
        "guidance_embed": False,
        "depth": 2,
        "depth_single_blocks": 2,
    },
    "auraflow": {"max_seq": 1024, "cond_seq_dim": 32, "n_double_layers": 2, "n_layers": 4},
    "pixart_alpha": {"image_model": "pixart_alpha", "micro_condition": True, "depth": 2, "model_max_length": 120},
    "pixart_sigma": {"image_model": "pixart_sigma", "micro_condition": False, "depth": 2, "model_max_length": 300},
}


def test_every_dit_family_is_registered():
    assert sorted(tiny_models.tiny_dit.FAMILIES) == sorted(STACKS)


@pytest.fixture(scope="module", params=sorted(STACKS))
def stack(request):
    return request.param, build_tiny(request.param, seed=0)


def test_stack_pieces_are_the_comfyui_classes_the_family_loads(stack):
    name, (model, clip, vae) = stack
    config_class, model_class, transformer_class, te_class, tokenizer_class, _, vae_class = STACKS[name]
    assert type(model.model.model_config) is config_class
    assert type(model.model) is model_class
    assert type(model.model.diffusion_model) is transformer_class
    assert isinstance(clip.cond_stage_model, te_class)
    assert type(clip.tokenizer) is tokenizer_class
    assert type(vae.first_stage_model) is vae_class


def test_text_encoders_are_the_real_classes_with_real_vocabularies(stack):
    name, (_, clip, _) = stack
    for attribute, (encoder_class, transformer_class, vocabulary) in ENCODERS[name].items():
        encoder = getattr(clip.cond_stage_model, attribute)
        assert type(encoder) is encoder_class, attribute
        if transformer_class is not None:
            assert type(encoder.transformer) is transformer_class, attribute
        assert encoder.transformer.get_input_embeddings().weight.shape[0] == vocabulary, attribute


def test_vae_gives_the_family_latent_channels(stack, datasets_dir):
    name, (model, _, vae) = stack
    channels = STACKS[name][5]
    image = Image.open(os.path.join(datasets_dir, "dreambooth_dog", "00.jpg")).convert("RGB").resize((64, 64))
    with torch.inference_mode():
        latent = vae.encode(torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0)[None])
    assert model.model.latent_format.latent_channels == channels
    assert latent.shape[1] == channels
    assert tuple(latent.shape[-2:]) == (8, 8)


def test_comfyui_model_detection_reads_the_real_layout(stack):
    name, (model, _, _) = stack
    detected = comfy.model_detection.detect_unet_config(model.model.diffusion_model.state_dict(), "")
    assert {key: detected.get(key) for key in DETECTED[name]} == DETECTED[name]


def _apply(model, conditioning, latent):
    base = model.model
    width, height = latent.shape[-1] * 8, latent.shape[-2] * 8
    inputs = batch_inputs([model_inputs(base, conditioning, latent[0], "cpu", (width, height))])
    return inputs, base.apply_model(latent, torch.tensor([0.5]), **inputs)


def test_prompt_runs_through_extra_conds_into_the_transformer(stack):
    name, (model, clip, _) = stack
    fmt = model.model.latent_format
    shape = (1, fmt.latent_channels) + (1,) * (fmt.latent_dimensions == 3) + (16, 16)  # 128 px
    if name.startswith("pixart"):
        shape = shape[:-2] + (40, 40)  # PixArtMS needs images of ~264 px or more (see tiny_dit)
    latent = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        conditioning = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
        _, out = _apply(model, conditioning, latent)
    assert out.shape == latent.shape
    assert torch.isfinite(out).all()


def test_hunyuan_image21_glyph_encoder_feeds_the_byt5_mapper():
    model, clip, _ = build_tiny("hunyuan_image21", seed=0)
    latent = torch.randn((1, 64, 8, 8), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        quoted = clip.encode_from_tokens_scheduled(clip.tokenize('a sign that says "sks"'))
        plain = clip.encode_from_tokens_scheduled(clip.tokenize("a sign that says sks"))
        inputs, with_glyphs = _apply(model, quoted, latent)
        _, without = _apply(model, plain, latent)
    assert quoted[0][1]["conditioning_byt5small"].shape[-1] == 1472
    assert "conditioning_byt5small" not in plain[0][1]
    assert inputs["txt_byt5"].shape[-1] == 1472
    assert (with_glyphs - without).abs().max() > 1e-4


def test_qwen_vl_vision_tower_is_zeros_in_one_element_and_the_language_model_random():
    _, clip, _ = build_tiny("qwen_image", seed=0)
    transformer = clip.cond_stage_model.qwen25_7b.transformer
    vision = list(transformer.visual.parameters())
    assert sum(p.numel() for p in vision) > 600_000_000  # ComfyUI's full-size tower, as the real file has
    assert sum(p.untyped_storage().nbytes() for p in vision) == 4 * len(vision)  # one float each
    assert all(p.count_nonzero() == 0 for p in vision[:3])
    assert float(transformer.model.embed_tokens.weight.std()) > 0.1
