"""The objective derived from ComfyUI's model_sampling: targets, loss and timestep sampling."""
import comfy.model_sampling
import comfy.supported_models
import pytest
import torch

from eridiffusion.training.objective import Objective


def model_sampling(prediction, base=comfy.model_sampling.ModelSamplingDiscrete, **settings):
    class Sampling(base, prediction):
        pass
    model_config = comfy.supported_models.SD15({})
    model_config.sampling_settings = dict(model_config.sampling_settings, **settings)
    return Sampling(model_config)


SAMPLINGS = {
    "eps": lambda: model_sampling(comfy.model_sampling.EPS),
    "v_prediction": lambda: model_sampling(comfy.model_sampling.V_PREDICTION),
    "rectified_flow": lambda: model_sampling(comfy.model_sampling.CONST, comfy.model_sampling.ModelSamplingDiscreteFlow,
                                             shift=3.0, multiplier=1000),
}


@pytest.mark.parametrize("name", SAMPLINGS)
def test_native_target_denoises_exactly_to_x0(name):
    ms = SAMPLINGS[name]()
    objective = Objective(ms)
    generator = torch.Generator().manual_seed(0)
    x0 = torch.randn(6, 4, 8, 8, generator=generator)
    noise = torch.randn(6, 4, 8, 8, generator=generator)
    sigma = objective.sample_sigmas(6, generator, "cpu")
    x_t = objective.noisy_latent(x0, noise, sigma)
    target = objective.native_target(x0, x_t, sigma)
    torch.testing.assert_close(ms.calculate_denoised(sigma, target, x_t), x0, rtol=1e-5, atol=1e-5)


def test_eps_target_is_the_noise_and_flow_target_is_noise_minus_x0():
    generator = torch.Generator().manual_seed(1)
    x0, noise = torch.randn(3, 4, 8, 8, generator=generator), torch.randn(3, 4, 8, 8, generator=generator)
    for name, expected in (("eps", noise), ("rectified_flow", noise - x0)):
        objective = Objective(SAMPLINGS[name]())
        sigma = objective.sample_sigmas(3, generator, "cpu")
        x_t = objective.noisy_latent(x0, noise, sigma)
        torch.testing.assert_close(objective.native_target(x0, x_t, sigma), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", SAMPLINGS)
def test_loss_is_native_mse_and_zero_for_a_perfect_prediction(name):
    ms = SAMPLINGS[name]()
    objective = Objective(ms)
    generator = torch.Generator().manual_seed(2)
    x0, noise = torch.randn(4, 4, 8, 8, generator=generator), torch.randn(4, 4, 8, 8, generator=generator)
    sigma = objective.sample_sigmas(4, generator, "cpu")
    x_t = objective.noisy_latent(x0, noise, sigma)
    target = objective.native_target(x0, x_t, sigma)
    prediction = target + 0.1 * torch.randn(target.shape, generator=generator)
    denoised = ms.calculate_denoised(sigma, prediction, x_t)
    loss = objective.loss(denoised, x0, sigma)
    torch.testing.assert_close(loss, (prediction - target).square().flatten(1).mean(1), rtol=1e-4, atol=1e-6)
    assert objective.loss(ms.calculate_denoised(sigma, target, x_t), x0, sigma).max().item() < 1e-8


def test_discrete_timesteps_are_uniform_over_the_schedule():
    ms = SAMPLINGS["eps"]()
    sigmas = Objective(ms).sample_sigmas(20000, torch.Generator().manual_seed(3), "cpu")
    t = ms.timestep(sigmas).float()
    assert sigmas.min() >= ms.sigma_min - 1e-6 and sigmas.max() <= ms.sigma_max + 1e-6
    histogram = torch.histc(t, bins=10, min=0, max=999) / len(t)
    assert (histogram - 0.1).abs().max().item() < 0.01
