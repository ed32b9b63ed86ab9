"""Every family's tiny stack, as devkit.tiny_models builds it by name, is ComfyUI's own classes: the
model config, model, transformer, text encoders and tokenizers each family loads, real vocabularies,
the family's latent channels, a layout ComfyUI's model detection recognises, text → extra_conds →
transformer end to end; for video, the VAE turns a real photo's frames into the family's latent
layout and back and ComfyUI's LoRA key map covers every linear layer (training them:
tests/training/model/test_families.py). Stacks of classes some tested ComfyUI lacks
(TinyFamily.needs) are looked up by path and skipped there with that reason. What one family's stack
does beyond these: tests/devkit/test_tiny_<family>.py."""

import importlib
import os

import comfy.ldm.aura.mmdit
import comfy.ldm.chroma.model
import comfy.ldm.flux.model
import comfy.ldm.hidream.model
import comfy.ldm.hunyuan_video.model
import comfy.ldm.lumina.model
import comfy.ldm.modules.diffusionmodules.mmdit
import comfy.ldm.omnigen.omnigen2
import comfy.ldm.pixart.pixartms
import comfy.ldm.qwen_image.model
import comfy.ldm.wan.vae
import comfy.lora
import comfy.model_base
import comfy.model_detection
import comfy.model_management
import comfy.sd
import comfy.sd1_clip
import comfy.sdxl_clip
import comfy.supported_models as sm
import comfy.taesd.taesd
import comfy.text_encoders.aura_t5
import comfy.text_encoders.flux
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

from devkit.tiny_kandinsky5 import KANDINSKY5_IMAGE_LAYOUT
from devkit.tiny_models import TINY_FAMILIES, build_tiny, family_params
from eridiffusion.training.model.inputs import batch_inputs, model_inputs

PROMPT = "a photo of sks dog"


def _host(path):
    """A class of the host by dotted path ("comfy.ldm.ernie.model.ErnieImageModel"): older hosts lack
    these modules, so they are looked up only in tests that run."""
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


# Image DiTs whose classes every tested host has.
te = comfy.text_encoders

# family: model config, model, transformer, text-encoder model, tokenizer, latent channels, VAE
DIT_STACKS = {
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
DIT_ENCODERS = {
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
DIT_DETECTED = {
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


class TestImageDiTStacks:
    def test_every_dit_family_is_registered(self):
        assert sorted(name for name in DIT_STACKS if name in TINY_FAMILIES) == sorted(DIT_STACKS)

    @pytest.fixture(scope="class", params=sorted(DIT_STACKS))
    def stack(self, request):
        return request.param, build_tiny(request.param, seed=0)

    def test_stack_pieces_are_the_comfyui_classes_the_family_loads(self, stack):
        name, (model, clip, vae) = stack
        config_class, model_class, transformer_class, te_class, tokenizer_class, _, vae_class = DIT_STACKS[name]
        assert type(model.model.model_config) is config_class
        assert type(model.model) is model_class
        assert type(model.model.diffusion_model) is transformer_class
        assert isinstance(clip.cond_stage_model, te_class)
        assert type(clip.tokenizer) is tokenizer_class
        assert type(vae.first_stage_model) is vae_class

    def test_text_encoders_are_the_real_classes_with_real_vocabularies(self, stack):
        name, (_, clip, _) = stack
        for attribute, (encoder_class, transformer_class, vocabulary) in DIT_ENCODERS[name].items():
            encoder = getattr(clip.cond_stage_model, attribute)
            assert type(encoder) is encoder_class, attribute
            if transformer_class is not None:
                assert type(encoder.transformer) is transformer_class, attribute
            assert encoder.transformer.get_input_embeddings().weight.shape[0] == vocabulary, attribute

    def test_vae_gives_the_family_latent_channels(self, stack, datasets_dir):
        name, (model, _, vae) = stack
        channels = DIT_STACKS[name][5]
        image = Image.open(os.path.join(datasets_dir, "dreambooth_dog", "00.jpg")).convert("RGB").resize((64, 64))
        with torch.inference_mode():
            latent = vae.encode(torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0)[None])
        assert model.model.latent_format.latent_channels == channels
        assert latent.shape[1] == channels
        assert tuple(latent.shape[-2:]) == (8, 8)

    def test_comfyui_model_detection_reads_the_real_layout(self, stack):
        name, (model, _, _) = stack
        detected = comfy.model_detection.detect_unet_config(model.model.diffusion_model.state_dict(), "")
        assert {key: detected.get(key) for key in DIT_DETECTED[name]} == DIT_DETECTED[name]

    def test_prompt_runs_through_extra_conds_into_the_transformer(self, stack, apply_model):
        name, (model, clip, _) = stack
        fmt = model.model.latent_format
        shape = (1, fmt.latent_channels) + (1,) * (fmt.latent_dimensions == 3) + (16, 16)  # 128 px
        if name.startswith("pixart"):
            shape = shape[:-2] + (40, 40)  # PixArtMS needs images of ~264 px or more (see tiny_pixart)
        latent = torch.randn(shape, generator=torch.Generator().manual_seed(0))
        with torch.inference_mode():
            conditioning = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
            _, out = apply_model(model, conditioning, latent)
        assert out.shape == latent.shape
        assert torch.isfinite(out).all()


# Image DiTs whose classes some tested hosts lack.
# family: model config, model, transformer, text-encoder model, tokenizer, VAE model
GATED_DIT_STACKS = {
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
GATED_DIT_ENCODERS = {
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
# and the sizes by which supported_models tells it from its neighbours. Kandinsky 5 Image is told from
# the video model by its 2560 width alone: its layout is detected, and the class built 64 wide.
DETECTED_FROM_LAYOUT = {"kandinsky5_image": KANDINSKY5_IMAGE_LAYOUT}
GATED_DIT_DETECTED = {
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
# 2x2 patches of TAEF2's 32 (tiny_ernie_image.tiny_ernie_image)
GATED_DIT_LATENT_CHANNELS = {"kandinsky5_image": 16, "longcat_image": 16, "ernie_image": 32, "anima": 16}


class TestImageDiTStacksSomeHostsLack:
    def test_every_dit_family_is_registered(self):
        assert sorted(name for name in GATED_DIT_STACKS if name in TINY_FAMILIES) == sorted(GATED_DIT_STACKS)

    @pytest.fixture(scope="class", params=family_params(sorted(GATED_DIT_STACKS)))
    def stack(self, request):
        return request.param, build_tiny(request.param, seed=0)

    def test_stack_pieces_are_the_comfyui_classes_the_family_loads(self, stack):
        name, (model, clip, vae) = stack
        config_class, model_class, transformer_class, te_class, tokenizer_class, vae_class = map(
            _host, GATED_DIT_STACKS[name]
        )
        assert type(model.model.model_config) is config_class
        assert type(model.model) is model_class
        assert type(model.model.diffusion_model) is transformer_class
        assert isinstance(clip.cond_stage_model, te_class)  # clip_target's te() subclasses it per checkpoint dtype
        assert type(clip.tokenizer) is tokenizer_class
        assert type(vae.first_stage_model) is vae_class

    def test_text_encoders_are_the_real_classes_with_real_vocabularies(self, stack):
        name, (_, clip, _) = stack
        for attribute, (encoder_class, transformer_class, vocabulary) in GATED_DIT_ENCODERS[name].items():
            encoder = getattr(clip.cond_stage_model, attribute)
            assert type(encoder) is _host(encoder_class), attribute
            if transformer_class is not None:
                assert type(encoder.transformer) is _host(transformer_class), attribute
            assert encoder.transformer.get_input_embeddings().weight.shape[0] == vocabulary, attribute

    def test_vae_gives_the_family_latent_channels(self, stack, datasets_dir):
        name, (model, _, vae) = stack
        image = Image.open(os.path.join(datasets_dir, "dreambooth_dog", "00.jpg")).convert("RGB").resize((64, 64))
        with torch.inference_mode():
            latent = vae.encode(torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0)[None])
        assert model.model.latent_format.latent_channels == GATED_DIT_LATENT_CHANNELS[name]
        assert latent.shape[1] == GATED_DIT_LATENT_CHANNELS[name]
        assert tuple(latent.shape[-2:]) == (8, 8)

    def test_comfyui_model_detection_reads_the_weights_as_the_family(self, stack):
        name, (model, _, _) = stack
        state_dict = model.model.diffusion_model.state_dict()
        if name in DETECTED_FROM_LAYOUT:  # built narrower than the width detection tells the class by
            state_dict = {key: torch.zeros(shape) for key, shape in DETECTED_FROM_LAYOUT[name].items()}
        detected = comfy.model_detection.detect_unet_config(state_dict, "")
        assert {key: detected.get(key) for key in GATED_DIT_DETECTED[name]} == GATED_DIT_DETECTED[name]
        assert type(comfy.model_detection.model_config_from_unet_config(detected, state_dict)) is _host(
            GATED_DIT_STACKS[name][0]
        )

    def test_prompt_runs_through_extra_conds_into_the_transformer(self, stack, latent_of, apply_model):
        _, (model, clip, _) = stack
        latent = latent_of(model)
        with torch.inference_mode():
            conditioning = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
            _, out = apply_model(model, conditioning, latent)
        assert out.shape == latent.shape
        assert torch.isfinite(out).all()


# Flux.1, Flux.2, Chroma and SD3.
# family: (model config class, BaseModel class, diffusion model class, text encoder class, tokenizer class,
#          VAE latent channels)
FLUX_AND_SD3_STACKS = {
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


@pytest.fixture(params=sorted(FLUX_AND_SD3_STACKS))
def family(request, stack_of):
    return request.param, stack_of(request.param)


def test_every_flux_and_sd3_family_is_registered():
    assert sorted(name for name in FLUX_AND_SD3_STACKS if name in TINY_FAMILIES) == sorted(FLUX_AND_SD3_STACKS)


def test_pieces_are_comfyuis_classes_for_the_family(family):
    name, (model, clip, vae) = family
    config_class, base_class, dit_class, te_class, tokenizer_class, _ = FLUX_AND_SD3_STACKS[name]
    assert type(model.model.model_config) is config_class
    assert type(model.model) is base_class
    assert type(model.model.diffusion_model) is dit_class
    assert isinstance(clip.cond_stage_model, te_class)
    assert isinstance(clip.tokenizer, tokenizer_class)
    assert isinstance(vae, comfy.sd.VAE) and isinstance(vae.first_stage_model, comfy.taesd.taesd.TAESD)


def test_vae_latents_have_the_family_channels_and_the_model_takes_them(family, dog_photo):
    name, (model, clip, vae) = family
    channels = FLUX_AND_SD3_STACKS[name][5]
    assert vae.latent_channels == channels
    with torch.inference_mode():
        latent = vae.encode(dog_photo())
        assert tuple(latent.shape) == (1, channels, 16, 16)
        base = model.model
        x = base.process_latent_in(latent)
        cond = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
        inputs = batch_inputs([model_inputs(base, cond, x[0], "cpu", (128, 128))])
        out = base.apply_model(x, torch.tensor([0.5]), **inputs)
    assert out.shape == latent.shape
    assert torch.isfinite(out).all()


# The variants of other rows (Chroma Radiance, Z-Image pixel space, Boogu), Lens and PixelDiT; the
# pixel-space ones get ComfyUI's pixel-space VAE, which hands images through unchanged (as 3-channel
# latents in [-1, 1]).
# family: model config, model, transformer, text-encoder model, tokenizer, VAE model
VARIANT_STACKS = {
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


@pytest.mark.parametrize("name", family_params(sorted(VARIANT_STACKS)))
def test_the_stack_is_comfyuis_own_classes(name):
    config_class, model_class, dit_class, te_class, tokenizer_class, vae_class = map(_host, VARIANT_STACKS[name])
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


# Video: SIZE x SIZE frames of a slow pan over a real photo (conftest's video_stack_of).
SIZE = 128
# family: (latent channels, spatial ratio, latent frames of 9 pixel frames)
VIDEO_LAYOUTS = {
    "wan21_t2v": (16, 8, 3),
    "wan21_vace": (16, 8, 3),
    "wan22_t2v": (48, 16, 3),
    "ltxv": (128, 32, 2),
    "hunyuan_video": (16, 8, 3),
    "hunyuan_video15": (32, 16, 3),
}


class TestVideoStacks:
    @pytest.fixture(scope="class", params=sorted(VIDEO_LAYOUTS))
    def video_stack(self, request, video_stack_of):
        name, model, _, vae, frames, latent, cond = video_stack_of(request.param)
        return name, model, vae, frames, latent, cond

    def test_vae_encodes_clips_into_the_family_latent_layout(self, video_stack):
        name, model, _, _, latent, _ = video_stack
        channels, ratio, latent_frames = VIDEO_LAYOUTS[name]
        assert model.model.latent_format.latent_channels == channels
        assert tuple(latent.shape) == (1, channels, latent_frames, SIZE // ratio, SIZE // ratio)
        assert 0.05 < float(latent.std()) < 20.0  # carries signal: neither collapsed nor blown up

    def test_vae_decodes_the_latent_back_to_every_frame(self, video_stack):
        _, _, vae, frames, latent, _ = video_stack
        with torch.inference_mode():
            decoded = vae.decode(latent)
        assert tuple(decoded.shape) == (1,) + tuple(frames.shape)
        assert float(decoded.std()) > 0.01

    def test_diffusion_model_predicts_a_latent_of_the_input_shape(self, video_stack):
        _, model, _, _, latent, cond = video_stack
        base = model.model
        x = base.process_latent_in(latent.float())
        inputs = batch_inputs([model_inputs(base, cond, x[0], "cpu", (SIZE, SIZE))])
        comfy.model_management.load_models_gpu([model], force_full_load=True)
        with torch.inference_mode():
            out = base.apply_model(x, torch.tensor([0.5]), **inputs)
        assert out.shape == x.shape
        assert torch.isfinite(out).all() and float(out.std()) > 1e-3

    def test_comfyui_lora_key_map_covers_every_linear_layer(self, video_stack):
        _, model, _, _, _, _ = video_stack
        mapped = set(comfy.lora.model_lora_keys_unet(model.model, {}).values())
        linears = [
            name for name, module in model.model.diffusion_model.named_modules() if isinstance(module, torch.nn.Linear)
        ]
        assert len(linears) >= 10
        assert [n for n in linears if f"diffusion_model.{n}.weight" not in mapped] == []


# family: (model config class, latent channels, spatial ratio, latent frames of its clip length)
GATED_VIDEO_LAYOUTS = {
    "kandinsky5": ("Kandinsky5", 16, 8, 3),
    "ltx2": ("LTXAV", 128, 32, 2),
    "wan21_fun_control": ("WAN21_FunControl2V", 16, 8, 3),
    "wan22_animate": ("WAN22_Animate", 16, 8, 3),
    "wan22_s2v": ("WAN22_S2V", 16, 8, 3),
    "cogvideox_t2v": ("CogVideoX_T2V", 16, 8, 3),
    "mochi": ("GenmoMochi", 12, 8, 2),
}
# Extra input channels beside the latent, as model_base.WAN21.concat_cond fills them with no control
# video (Fun Control) or reference image (Animate): zeros.
EMPTY_CONCAT = {"wan21_fun_control": 32, "wan22_animate": 20}
# The families trained from captions alone whose control, reference, pose, face or audio inputs stay empty.
CONTROLLED = ["cogvideox_t2v", "mochi", "wan21_fun_control", "wan22_animate", "wan22_s2v"]


class TestVideoStacksSomeHostsLack:
    @pytest.fixture(params=family_params(sorted(GATED_VIDEO_LAYOUTS)))
    def video_stack(self, request, video_stack_of):
        return video_stack_of(request.param)

    @pytest.fixture(params=family_params(CONTROLLED))
    def controlled_stack(self, request, video_stack_of):
        return video_stack_of(request.param)

    def test_layout_is_detected_as_the_family_class(self, video_stack):
        name, model = video_stack[:2]
        assert type(model.model.model_config).__name__ == GATED_VIDEO_LAYOUTS[name][0]

    def test_vae_encodes_clips_into_the_family_latent_layout(self, video_stack):
        name, model, _, _, _, latent, _ = video_stack
        _, channels, ratio, latent_frames = GATED_VIDEO_LAYOUTS[name]
        assert model.model.latent_format.latent_channels == channels
        assert tuple(latent.shape) == (1, channels, latent_frames, SIZE // ratio, SIZE // ratio)
        assert 0.05 < float(latent.std()) < 20.0  # carries signal: neither collapsed nor blown up

    def test_vae_decodes_the_latent_back_to_every_frame(self, video_stack):
        _, _, _, vae, frames, latent, _ = video_stack
        with torch.inference_mode():
            decoded = vae.decode(latent)
        assert tuple(decoded.shape) == (1,) + tuple(frames.shape)
        assert float(decoded.std()) > 0.01

    def test_diffusion_model_predicts_a_latent_of_the_input_shape(self, video_stack, video_inputs):
        _, model, _, _, _, latent, cond = video_stack
        x, inputs = video_inputs(model, latent, cond)
        comfy.model_management.load_models_gpu([model], force_full_load=True)
        with torch.inference_mode():
            out = model.model.apply_model(x, torch.tensor([0.5]), **inputs)
        assert out.shape == x.shape
        assert torch.isfinite(out).all() and float(out.std()) > 1e-3

    def test_comfyui_lora_key_map_covers_every_linear_layer(self, video_stack):
        model = video_stack[1]
        mapped = set(comfy.lora.model_lora_keys_unet(model.model, {}).values())
        linears = [
            name for name, module in model.model.diffusion_model.named_modules() if isinstance(module, torch.nn.Linear)
        ]
        assert len(linears) >= 10
        assert [n for n in linears if f"diffusion_model.{n}.weight" not in mapped] == []

    def test_control_inputs_are_the_empty_values_comfyui_gives_without_them(self, controlled_stack, video_inputs):
        name, model, _, _, _, latent, cond = controlled_stack
        _, inputs = video_inputs(model, latent, cond)
        if name in EMPTY_CONCAT:
            extra = inputs["c_concat"]
            assert tuple(extra.shape) == (1, EMPTY_CONCAT[name]) + tuple(latent.shape[2:])
            assert float(extra.abs().max()) == 0.0
        else:
            assert "c_concat" not in inputs
        # no pose, face, audio, reference or control-video input is made up
        made_up = {"pose_latents", "face_pixel_values", "audio_embed", "reference_latent", "reference_motion"}
        assert made_up.isdisjoint(inputs) and "control_video" not in inputs
