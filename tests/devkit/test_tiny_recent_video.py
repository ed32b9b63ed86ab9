"""The tiny Kandinsky 5, LTX-2, Wan 2.1 Fun Control, Wan 2.2 Animate and S2V, CogVideoX and Mochi
stacks behave like ComfyUI's loaded checkpoints of those families: the VAE turns a real photo's
frames into the family's latent layout and back, the diffusion model maps that latent to one of the
same shape under the text encoder's conditioning (LTX-2 on its video stream alone; the control
inputs at their empty values), and ComfyUI's LoRA key map covers every linear layer (training them:
tests/training/model/test_families.py). On a ComfyUI without these classes the tests are skipped."""

import gc
import os

import comfy.lora
import comfy.model_management
import numpy as np
import pytest
import torch
from PIL import Image

from devkit import tiny_models, tiny_recent_video, tiny_video_2026  # noqa: F401 (tiny_models first: it imports the stacks)
from devkit.tiny_models import family_params
from eridiffusion.training.model.inputs import batch_inputs, model_inputs

SIZE = 128
PROMPT = "a photo of sks dog"
# family: (model config class, latent channels, spatial ratio, latent frames of its clip length)
LAYOUTS = {
    "kandinsky5": ("Kandinsky5", 16, 8, 3),
    "ltx2": ("LTXAV", 128, 32, 2),
    "wan21_fun_control": ("WAN21_FunControl2V", 16, 8, 3),
    "wan22_animate": ("WAN22_Animate", 16, 8, 3),
    "wan22_s2v": ("WAN22_S2V", 16, 8, 3),
    "cogvideox_t2v": ("CogVideoX_T2V", 16, 8, 3),
    "mochi": ("GenmoMochi", 12, 8, 2),
}


def _photo_pan(datasets_dir, count):
    photo = Image.open(os.path.join(datasets_dir, "dreambooth_dog", "00.jpg")).convert("RGB").resize((SIZE + 32,) * 2)
    pixels = np.asarray(photo, dtype=np.float32) / 255.0
    return torch.from_numpy(np.stack([pixels[4 * i : 4 * i + SIZE, 2 * i : 2 * i + SIZE] for i in range(count)]))


_STACKS = {}


def _stack(name, datasets_dir):
    """(name, model, clip, vae, frames, latent, conditioning) of a family, built once per module."""
    if name not in _STACKS:
        family = tiny_models.TINY_FAMILIES[name]
        model, clip, vae = family.build(0)
        frames = _photo_pan(datasets_dir, family.video_frames)
        with torch.inference_mode():
            latent = vae.encode(frames)
            cond = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
        _STACKS[name] = (name, model, clip, vae, frames, latent, cond)
    return _STACKS[name]


@pytest.fixture(scope="module", autouse=True)
def _release_stacks():
    """Drop the stacks while ComfyUI's modules still exist (its patchers' finalizers need them)."""
    yield
    _STACKS.clear()
    gc.collect()


@pytest.fixture(params=family_params(sorted(LAYOUTS)))
def video_stack(request, datasets_dir):
    return _stack(request.param, datasets_dir)


@pytest.fixture(params=family_params(["kandinsky5"]))
def kandinsky5_stack(request, datasets_dir):
    return _stack(request.param, datasets_dir)


@pytest.fixture(params=family_params(["ltx2"]))
def ltx2_stack(request, datasets_dir):
    return _stack(request.param, datasets_dir)


def _inputs(model, latent, cond):
    base = model.model
    x = base.process_latent_in(latent.float())
    return x, batch_inputs([model_inputs(base, cond, x[0], "cpu", (SIZE, SIZE))])


def test_layout_is_detected_as_the_family_class(video_stack):
    name, model = video_stack[:2]
    assert type(model.model.model_config).__name__ == LAYOUTS[name][0]


def test_vae_encodes_clips_into_the_family_latent_layout(video_stack):
    name, model, _, _, _, latent, _ = video_stack
    _, channels, ratio, latent_frames = LAYOUTS[name]
    assert model.model.latent_format.latent_channels == channels
    assert tuple(latent.shape) == (1, channels, latent_frames, SIZE // ratio, SIZE // ratio)
    assert 0.05 < float(latent.std()) < 20.0  # carries signal: neither collapsed nor blown up


def test_vae_decodes_the_latent_back_to_every_frame(video_stack):
    _, _, _, vae, frames, latent, _ = video_stack
    with torch.inference_mode():
        decoded = vae.decode(latent)
    assert tuple(decoded.shape) == (1,) + tuple(frames.shape)
    assert float(decoded.std()) > 0.01


def test_diffusion_model_predicts_a_latent_of_the_input_shape(video_stack):
    _, model, _, _, _, latent, cond = video_stack
    x, inputs = _inputs(model, latent, cond)
    comfy.model_management.load_models_gpu([model], force_full_load=True)
    with torch.inference_mode():
        out = model.model.apply_model(x, torch.tensor([0.5]), **inputs)
    assert out.shape == x.shape
    assert torch.isfinite(out).all() and float(out.std()) > 1e-3


def test_comfyui_lora_key_map_covers_every_linear_layer(video_stack):
    model = video_stack[1]
    mapped = set(comfy.lora.model_lora_keys_unet(model.model, {}).values())
    linears = [
        name for name, module in model.model.diffusion_model.named_modules() if isinstance(module, torch.nn.Linear)
    ]
    assert len(linears) >= 10
    assert [n for n in linears if f"diffusion_model.{n}.weight" not in mapped] == []


def test_kandinsky5_reads_an_empty_first_frame_and_mask_beside_the_latent(kandinsky5_stack):
    _, model, _, _, _, latent, cond = kandinsky5_stack
    _, inputs = _inputs(model, latent, cond)
    extra = inputs["c_concat"]
    assert tuple(extra.shape) == (1, 17) + tuple(latent.shape[2:])  # 16 image channels + the mask
    assert float(extra.abs().max()) == 0.0  # text-to-video: no first frame, nothing masked


def test_ltx2_runs_its_video_stream_alone_on_a_video_latent(ltx2_stack):
    _, model, _, _, _, latent, cond = ltx2_stack
    x, inputs = _inputs(model, latent, cond)
    dit = model.model.diffusion_model
    ran = []
    hooks = [
        module.register_forward_hook(lambda m, i, o, name=name: ran.append(name))
        for name, module in dit.transformer_blocks.named_modules()
        if name.count(".") == 1
    ]  # each block's attention and feed-forward modules
    comfy.model_management.load_models_gpu([model], force_full_load=True)
    try:
        with torch.inference_mode():
            model.model.apply_model(x, torch.tensor([0.5]), **inputs)
    finally:
        for hook in hooks:
            hook.remove()
    assert sorted({name.split(".")[1] for name in ran}) == ["attn1", "attn2", "ff"]


def test_ltx2_text_encoder_projects_every_gemma_hidden_state_to_the_caption_width(ltx2_stack):
    _, model, clip, _, _, _, cond = ltx2_stack
    encoder = clip.cond_stage_model
    gemma = tiny_recent_video.GEMMA3_TINY
    assert encoder.text_embedding_projection.in_features == gemma["hidden_size"] * (gemma["num_hidden_layers"] + 1)
    assert cond[0][0].shape[-1] == model.model.diffusion_model.caption_channels == tiny_recent_video.LTX2_WIDTH
    stored = sum(p.untyped_storage().nbytes() for p in encoder.parameters())
    assert stored < 50 * 2**20  # the full-size SigLIP tower is zeros without memory (real Gemma 3: 48 GB)


# Extra input channels beside the latent, as model_base.WAN21.concat_cond fills them with no control
# video (Fun Control) or reference image (Animate): zeros.
EMPTY_CONCAT = {"wan21_fun_control": 32, "wan22_animate": 20}


@pytest.fixture(params=family_params(sorted(tiny_video_2026.FAMILIES)))
def controlled_stack(request, datasets_dir):
    return _stack(request.param, datasets_dir)


def test_control_inputs_are_the_empty_values_comfyui_gives_without_them(controlled_stack):
    name, model, _, _, _, latent, cond = controlled_stack
    _, inputs = _inputs(model, latent, cond)
    if name in EMPTY_CONCAT:
        extra = inputs["c_concat"]
        assert tuple(extra.shape) == (1, EMPTY_CONCAT[name]) + tuple(latent.shape[2:])
        assert float(extra.abs().max()) == 0.0
    else:
        assert "c_concat" not in inputs
    # no pose, face, audio, reference or control-video input is made up
    made_up = {"pose_latents", "face_pixel_values", "audio_embed", "reference_latent", "reference_motion"}
    assert made_up.isdisjoint(inputs) and "control_video" not in inputs
