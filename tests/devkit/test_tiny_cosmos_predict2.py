"""The tiny stacks on Cosmos-Predict2's MiniTrainDIT, and what they need of the trainer beyond the family
bar: Anima runs its LLM adapter in the training forward as the sampler does in extra_conds; the fused
RMSNorm + RoPE kernel Cosmos-Predict2's attention calls gets the right backward; Cosmos-Predict2's
noise levels come from ComfyUI's own Cosmos rectified-flow sampling, whose sigma() takes one timestep
at a time."""

import comfy.model_sampling
import pytest
import torch

from devkit.tiny_cosmos_predict2 import ANIMA_ADAPTER
from devkit.tiny_models import build_tiny, family_params
from eridiffusion.comfy_compat import host_version, register_fused_rope_backwards
from eridiffusion.training.model.objective import Objective, ObjectiveSpec, sigmas_of_timesteps

PROMPT = "a photo of sks dog"


@pytest.mark.parametrize("name", family_params(["anima"]))
def test_anima_runs_its_llm_adapter_in_the_training_forward_as_the_sampler_does_in_extra_conds(
    name, latent_of, apply_model
):
    # Outside inference mode Anima's extra_conds hands the T5 ids to the forward, which runs the LLM adapter
    # there (so its adapters get gradients); the sampler's path runs it in extra_conds. Same output.
    model, clip, _ = build_tiny(name, seed=0)
    latent = latent_of(model)
    with torch.inference_mode():
        conditioning = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
        sampler_inputs, sampled = apply_model(model, conditioning, latent)
    training_inputs, trained = apply_model(model, conditioning, latent)
    assert "t5xxl_ids" in training_inputs and "t5xxl_ids" not in sampler_inputs
    assert training_inputs["t5xxl_ids"].shape[-1] == len(clip.tokenize(PROMPT)["t5xxl"][0])
    # the adapter output padded to 512 tokens, not the prompt-long Qwen3 states
    assert sampler_inputs["c_crossattn"].shape[1:] == (512, ANIMA_ADAPTER["target_dim"])
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


def _cosmos_sampling():
    if not hasattr(comfy.model_sampling, "ModelSamplingCosmosRFlow"):
        pytest.skip(f"ComfyUI {host_version()} has no Cosmos rectified-flow sampling")

    class Sampling(comfy.model_sampling.ModelSamplingCosmosRFlow, comfy.model_sampling.COSMOS_RFLOW):
        pass

    class Config:  # CosmosT2IPredict2's sampling_settings
        sampling_settings = {"sigma_data": 1.0, "sigma_max": 80.0, "sigma_min": 0.002}

    return Sampling(Config())


def test_cosmos_sigmas_of_a_batch_are_comfyuis_one_by_one():
    sampling = _cosmos_sampling()
    timesteps = torch.tensor([0.0, 0.001, 0.3, 0.5, 0.9, 0.98, 0.9877, 0.999, 1.0])
    expected = torch.stack([torch.as_tensor(sampling.sigma(t)).float().reshape(()) for t in timesteps])
    assert torch.allclose(sigmas_of_timesteps(sampling, timesteps), expected)


def test_cosmos_training_draws_a_batch_of_noise_levels_inside_its_schedule():
    sampling = _cosmos_sampling()
    objective = Objective(sampling, ObjectiveSpec(timestep_sampling="logit_normal"))
    sigmas = objective.sample_sigmas(16, torch.Generator().manual_seed(0), "cpu")
    assert sigmas.shape == (16,)
    assert bool(((sigmas >= sampling.sigma_min) & (sigmas <= sampling.sigma_max * (1 + 1e-6))).all())
