"""Issue 48: with gradient_checkpointing on, a trained text encoder's blocks recompute in the backward
as the diffusion model's do (without it, backward held every layer's activations and every weight
ComfyUI casts to the encoder's fp32 compute dtype: on an H200 Qwen-Image's run with its Qwen2.5-VL 7B
trained peaked at 79.2 GiB against 42.0 without the encoder), and the run trains exactly as without."""

import os

import pytest
import torch

from devkit.tiny_models import family_params
from eridiffusion.training.model.text_encoder import TEXT_BLOCK_MODULE
from eridiffusion.training.run.trainer import train_lora

from .test_text_encoder_families import ENCODERS, te_config, training_data

# one family per encoder class, and SD1.5's CLIP-L (its residuals added in place)
TRAINED = {**ENCODERS, "sd15": "clip_l"}


def first_block_linear(clip, encoder):
    """A linear layer inside the first block of `encoder`'s text transformer (its calls count the
    block's computations: a recomputed block calls it again, its wrapper does not)."""
    modules = clip.cond_stage_model.named_modules()
    block = next(m for n, m in modules if (g := TEXT_BLOCK_MODULE.match(n)) and g.group(1) == encoder)
    return next(m for m in block.modules() if isinstance(m, torch.nn.Linear))


def counted_run(name, clip, model, data, folder, checkpointing):
    calls = []
    hook = first_block_linear(clip, TRAINED[name]).register_forward_hook(lambda *_: calls.append(1))
    config = te_config(TRAINED[name], steps=3, log_every=1, gradient_checkpointing=checkpointing)
    try:
        with torch.inference_mode(False):
            result = train_lora(model, data, config, os.path.join(folder, str(checkpointing)), clip=clip)
    finally:
        hook.remove()
    return result, len(calls)


@pytest.mark.parametrize("name", family_params(sorted(TRAINED)))
def test_a_trained_encoders_blocks_recompute_and_train_exactly_as_without(name, request, tmp_path):
    model, clip, data = training_data(name, request, str(tmp_path))
    plain, plain_calls = counted_run(name, clip, model, data, str(tmp_path), False)
    recomputed, recomputed_calls = counted_run(name, clip, model, data, str(tmp_path), True)
    # each of the 3 steps' encodings with gradients runs the block once more (evaluation's do not)
    assert recomputed_calls - plain_calls >= 3, (plain_calls, recomputed_calls)
    # exactly on the CPU; on a GPU, the recomputed products may take other kernels (SD1.5's convolutions on
    # an H200: a loss 9e-5 apart after one step, which Adam's normalized steps carry into the adapters'
    # near-zero entries: 2.6% of a tensor's norm after three), so the runs agree to the GPU's tolerance
    loss_tolerance, tensor_tolerance = (1e-3, 0.1) if torch.cuda.is_available() else (1e-5, 1e-6)
    assert recomputed.losses == pytest.approx(plain.losses, rel=loss_tolerance, abs=1e-6)
    a, b = plain.lora.tensors, recomputed.lora.tensors
    assert a.keys() == b.keys() and a
    if torch.cuda.is_available():
        assert max(((a[k] - b[k]).norm() / b[k].norm().clamp_min(1e-12)).item() for k in a) < tensor_tolerance
    else:
        assert max((a[k] - b[k]).abs().max().item() for k in a) < tensor_tolerance
