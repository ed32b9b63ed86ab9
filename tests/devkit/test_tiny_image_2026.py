"""What the 2026 image DiT rows (devkit/tiny_image_2026.py) need of the trainer beyond the family bar:
Cosmos-Predict2's noise levels come from ComfyUI's own Cosmos rectified-flow sampling, whose
sigma() takes one timestep at a time."""

import comfy.model_sampling
import pytest
import torch

from eridiffusion.comfy_compat import host_version
from eridiffusion.training.model.objective import Objective, ObjectiveSpec, sigmas_of_timesteps


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
