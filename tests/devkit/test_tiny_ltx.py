"""The tiny LTX-2 stack trains on its video stream alone, and its Gemma 3 text encoder projects every
hidden state to the caption width, its full-size SigLIP tower held as zeros without memory."""

import comfy.model_management
import pytest
import torch

from devkit import tiny_ltx
from devkit.tiny_models import family_params


@pytest.fixture(params=family_params(["ltx2"]))
def ltx2_stack(request, video_stack_of):
    return video_stack_of(request.param)


def test_ltx2_runs_its_video_stream_alone_on_a_video_latent(ltx2_stack, video_inputs):
    _, model, _, _, _, latent, cond = ltx2_stack
    x, inputs = video_inputs(model, latent, cond)
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
    gemma = tiny_ltx.GEMMA3_TINY
    assert encoder.text_embedding_projection.in_features == gemma["hidden_size"] * (gemma["num_hidden_layers"] + 1)
    assert cond[0][0].shape[-1] == model.model.diffusion_model.caption_channels == tiny_ltx.LTX2_WIDTH
    stored = sum(p.untyped_storage().nbytes() for p in encoder.parameters())
    assert stored < 50 * 2**20  # the full-size SigLIP tower is zeros without memory (real Gemma 3: 48 GB)
