"""The tiny video stacks behave like ComfyUI's loaded video checkpoints: the VAE turns 9 frames of
a real photo into the family's latent layout and back, the diffusion model maps that latent to one
of the same shape under the text encoder's conditioning, and ComfyUI's LoRA key map covers every
linear layer (training them: tests/training/model/test_families.py)."""

import os

import comfy.lora
import comfy.model_management
import numpy as np
import pytest
import torch
from PIL import Image

from devkit import tiny_models, tiny_video  # noqa: F401 (tiny_models first: it imports tiny_video)
from devkit.detected_configs import detected_model_config
from eridiffusion.training.model.inputs import batch_inputs, model_inputs

SIZE = 128
# family: (latent channels, spatial ratio, latent frames of 9 pixel frames)
LAYOUTS = {
    "wan21_t2v": (16, 8, 3),
    "wan21_vace": (16, 8, 3),
    "wan22_t2v": (48, 16, 3),
    "ltxv": (128, 32, 2),
    "hunyuan_video": (16, 8, 3),
    "hunyuan_video15": (32, 16, 3),
}


@pytest.fixture(scope="module", params=sorted(tiny_video.FAMILIES))
def video_stack(request, datasets_dir):
    family = tiny_video.FAMILIES[request.param]
    model, clip, vae = family.build(0)
    photo = Image.open(os.path.join(datasets_dir, "dreambooth_dog", "00.jpg")).convert("RGB").resize((SIZE + 32,) * 2)
    pixels = np.asarray(photo, dtype=np.float32) / 255.0
    frames = torch.from_numpy(
        np.stack(
            [
                pixels[4 * i : 4 * i + SIZE, 2 * i : 2 * i + SIZE]  # a slow pan
                for i in range(family.video_frames)
            ]
        )
    )
    with torch.inference_mode():
        latent = vae.encode(frames)
        cond = clip.encode_from_tokens_scheduled(clip.tokenize("a photo of sks dog"))
    return request.param, model, vae, frames, latent, cond


def test_vae_encodes_clips_into_the_family_latent_layout(video_stack):
    name, model, _, _, latent, _ = video_stack
    channels, ratio, latent_frames = LAYOUTS[name]
    assert model.model.latent_format.latent_channels == channels
    assert tuple(latent.shape) == (1, channels, latent_frames, SIZE // ratio, SIZE // ratio)
    assert 0.05 < float(latent.std()) < 20.0  # carries signal: neither collapsed nor blown up


def test_vae_decodes_the_latent_back_to_every_frame(video_stack):
    _, _, vae, frames, latent, _ = video_stack
    with torch.inference_mode():
        decoded = vae.decode(latent)
    assert tuple(decoded.shape) == (1,) + tuple(frames.shape)
    assert float(decoded.std()) > 0.01


def test_diffusion_model_predicts_a_latent_of_the_input_shape(video_stack):
    _, model, _, _, latent, cond = video_stack
    base = model.model
    x = base.process_latent_in(latent.float())
    inputs = batch_inputs([model_inputs(base, cond, x[0], "cpu", (SIZE, SIZE))])
    comfy.model_management.load_models_gpu([model], force_full_load=True)
    with torch.inference_mode():
        out = base.apply_model(x, torch.tensor([0.5]), **inputs)
    assert out.shape == x.shape
    assert torch.isfinite(out).all() and float(out.std()) > 1e-3


def test_comfyui_lora_key_map_covers_every_linear_layer(video_stack):
    _, model, _, _, _, _ = video_stack
    mapped = set(comfy.lora.model_lora_keys_unet(model.model, {}).values())
    linears = [
        name for name, module in model.model.diffusion_model.named_modules() if isinstance(module, torch.nn.Linear)
    ]
    assert len(linears) >= 10
    assert [n for n in linears if f"diffusion_model.{n}.weight" not in mapped] == []


def test_qwen_vision_tower_is_replaced_by_a_tiny_one():
    model_config = detected_model_config(
        tiny_video.HUNYUAN_VIDEO15_LAYOUT, tiny_video.HUNYUAN_VIDEO15_SHRINK, "HunyuanVideo15"
    )
    options = {"qwen25_7b_model_config": tiny_video.LLAMA_TINY, "_model_config": tiny_video.BYT5_TINY}
    clip = tiny_video._qwen_vl_text_encoder(model_config.clip_target(), torch.Generator().manual_seed(0), options)
    visual = clip.cond_stage_model.qwen25_7b.transformer.visual
    assert visual.hidden_size == 32
    assert sum(p.numel() for p in clip.cond_stage_model.parameters()) < 20_000_000  # real: over 7 billion
