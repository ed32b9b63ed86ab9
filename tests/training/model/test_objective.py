"""The objective derived from ComfyUI's model_sampling: targets, loss and timestep sampling."""

import dataclasses
import math

import comfy.model_sampling
import comfy.supported_models
import pytest
import torch

from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.model.objective import LOSSES, Objective, ObjectiveSpec, resolution_shift, sample_fractions


def model_sampling(prediction, base=comfy.model_sampling.ModelSamplingDiscrete, **settings):
    class Sampling(base, prediction):
        pass

    model_config = comfy.supported_models.SD15({})
    model_config.sampling_settings = dict(model_config.sampling_settings, **settings)
    return Sampling(model_config)


SAMPLINGS = {
    "eps": lambda: model_sampling(comfy.model_sampling.EPS),
    "v_prediction": lambda: model_sampling(comfy.model_sampling.V_PREDICTION),
    "rectified_flow": lambda: model_sampling(
        comfy.model_sampling.CONST, comfy.model_sampling.ModelSamplingDiscreteFlow, shift=3.0, multiplier=1000
    ),
}


def noisy_batch(objective, n, seed):
    """(generator, x0, sigma, x_t, native target) of n random latents at sampled noise levels."""
    generator = torch.Generator().manual_seed(seed)
    x0, noise = torch.randn(n, 4, 8, 8, generator=generator), torch.randn(n, 4, 8, 8, generator=generator)
    sigma = objective.sample_sigmas(n, generator, "cpu")
    x_t = objective.noisy_latent(x0, noise, sigma)
    return generator, x0, sigma, x_t, objective.native_target(x0, x_t, sigma)


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
    generator, x0, sigma, x_t, target = noisy_batch(objective, 4, seed=2)
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


def all_model_samplings():
    """Every (schedule, prediction) pair ComfyUI builds for the model types it loads."""
    import comfy.model_base

    config = comfy.supported_models.SD15({})
    out = {}
    for model_type in comfy.model_base.ModelType:
        if model_type in (comfy.model_base.ModelType.STABLE_CASCADE, comfy.model_base.ModelType.FLOW_COSMOS):
            continue  # Stable Cascade and Cosmos are not families EriDiffusion trains
        out[model_type.name] = comfy.model_base.model_sampling(config, model_type)
    return out


@pytest.mark.parametrize("name", sorted(all_model_samplings()))
def test_target_satisfies_calculate_denoised_for_every_comfyui_model_type(name):
    ms = all_model_samplings()[name]
    _, x0, sigma, x_t, target = noisy_batch(Objective(ms), 8, seed=4)
    torch.testing.assert_close(ms.calculate_denoised(sigma, target, x_t), x0, rtol=1e-4, atol=1e-4)


# --- timestep samplers: the empirical distribution of 20k draws against the definition (KS test)


def _normal_cdf(x):
    return 0.5 * (1 + torch.erf(x / 2**0.5))


def _logit(x):
    return torch.log(x) - torch.log1p(-x)


def _inverse_shift(sigma, s):
    return sigma / (s - (s - 1) * sigma)


KS_N = 20_000
KS_CRITICAL = 1.949 / KS_N**0.5  # alpha = 0.001


def _ks_statistic(samples, cdf):
    x, _ = torch.sort(samples.double())
    n = len(x)
    f = cdf(x)
    upper = torch.arange(1, n + 1, dtype=torch.float64) / n - f
    lower = f - torch.arange(0, n, dtype=torch.float64) / n
    return max(upper.max().item(), lower.max().item())


SAMPLERS = {
    "uniform": (ObjectiveSpec(timestep_sampling="uniform"), None, lambda x: x),
    "logit_normal": (
        ObjectiveSpec(timestep_sampling="logit_normal", logit_mean=0.5, logit_std=0.8),
        None,
        lambda x: _normal_cdf((_logit(x) - 0.5) / 0.8),
    ),
    "sigmoid": (
        ObjectiveSpec(timestep_sampling="sigmoid", sigmoid_scale=1.7),
        None,
        lambda x: _normal_cdf(_logit(x) / 1.7),
    ),
    "shift_fixed": (
        ObjectiveSpec(timestep_sampling="shift", shift=3.0),
        None,
        lambda x: _normal_cdf(_logit(_inverse_shift(x, 3.0))),
    ),
    # 1024² Flux: 4096 tokens, mu = 1.15
    "shift_resolution": (
        ObjectiveSpec(timestep_sampling="shift", shift=0.0),
        4096,
        lambda x: _normal_cdf(_logit(_inverse_shift(x, math.exp(1.15)))),
    ),
}


@pytest.mark.parametrize("name", SAMPLERS)
def test_timestep_sampler_matches_its_distribution(name):
    spec, tokens, cdf = SAMPLERS[name]
    draws = sample_fractions(spec, KS_N, torch.Generator().manual_seed(11), tokens)
    assert _ks_statistic(draws, cdf) < KS_CRITICAL
    # and a wrong definition is told apart: the test has the power to fail
    assert _ks_statistic(draws, lambda x: cdf(x) ** 1.2) > KS_CRITICAL


@pytest.mark.parametrize("name", SAMPLERS)
def test_a_timestep_range_cuts_the_distribution_to_it(name):
    spec, tokens, cdf = SAMPLERS[name]
    low, high = 0.2, 0.6
    spec = dataclasses.replace(spec, timestep_min=low, timestep_max=high)
    draws = sample_fractions(spec, KS_N, torch.Generator().manual_seed(12), tokens)
    assert draws.min().item() >= low - 1e-5 and draws.max().item() <= high + 1e-5
    at_low, at_high = (cdf(torch.tensor(bound, dtype=torch.float64)) for bound in (low, high))

    def truncated(x):
        return (cdf(x) - at_low) / (at_high - at_low)

    assert _ks_statistic(draws.clamp(low, high), truncated) < KS_CRITICAL
    assert _ks_statistic(draws.clamp(low, high), lambda x: truncated(x) ** 1.2) > KS_CRITICAL


@pytest.mark.parametrize("name", ["eps", "rectified_flow"])
def test_sampled_noise_levels_stay_inside_the_range_in_the_family_s_units(name):
    ms = SAMPLINGS[name]()
    spec = ObjectiveSpec(timestep_sampling="logit_normal", timestep_min=0.7, timestep_max=0.9)
    sigmas = Objective(ms, spec).sample_sigmas(5000, torch.Generator().manual_seed(13), "cpu")
    # ε/v: the fraction of the discrete timesteps; flow: σ itself
    fraction = sigmas if name == "rectified_flow" else ms.timestep(sigmas).float() / 999
    assert fraction.min().item() >= 0.7 - 1e-3 and fraction.max().item() <= 0.9 + 1e-3
    assert fraction.max().item() - fraction.min().item() > 0.15
    with pytest.raises(EriDiffusionError, match="timestep_min 0.5 must be below timestep_max 0.5"):
        ObjectiveSpec(timestep_min=0.5, timestep_max=0.5)


def test_resolution_shift_follows_flux_endpoints():
    assert resolution_shift(256) == pytest.approx(math.exp(0.5))
    assert resolution_shift(4096) == pytest.approx(math.exp(1.15))


def test_flow_sigmas_are_the_sampled_flow_times():
    ms = SAMPLINGS["rectified_flow"]()
    spec = ObjectiveSpec(timestep_sampling="logit_normal")
    sigmas = Objective(ms, spec).sample_sigmas(1000, torch.Generator().manual_seed(5), "cpu")
    expected = sample_fractions(spec, 1000, torch.Generator().manual_seed(5))
    torch.testing.assert_close(sigmas, expected.clamp(float(ms.sigma_min), float(ms.sigma_max)))


def test_min_snr_weights_eps_and_v_losses():
    sigma = torch.tensor([0.1, 0.5, 2.0])  # SNR 100, 4, 0.25
    eps = Objective(
        SAMPLINGS["eps"](), ObjectiveSpec(timestep_sampling="uniform", loss_weighting="min_snr", min_snr_gamma=5.0)
    )
    v = Objective(
        SAMPLINGS["v_prediction"](),
        ObjectiveSpec(timestep_sampling="uniform", loss_weighting="min_snr", min_snr_gamma=5.0),
    )
    torch.testing.assert_close(eps.weights(sigma), torch.tensor([5 / 100, 1.0, 1.0]))
    torch.testing.assert_close(v.weights(sigma), torch.tensor([5 / 101, 4 / 5, 0.25 / 1.25]))


def test_min_snr_and_shift_are_refused_where_they_do_not_apply():
    with pytest.raises(EriDiffusionError, match="min_snr"):
        Objective(SAMPLINGS["rectified_flow"](), ObjectiveSpec(timestep_sampling="uniform", loss_weighting="min_snr"))
    with pytest.raises(EriDiffusionError, match="shift"):
        Objective(SAMPLINGS["eps"](), ObjectiveSpec(timestep_sampling="shift", shift=3.0))


def test_noise_offset_adds_a_per_channel_constant():
    objective = Objective(SAMPLINGS["eps"](), ObjectiveSpec(timestep_sampling="uniform", noise_offset=0.5))
    plain = Objective(SAMPLINGS["eps"](), ObjectiveSpec(timestep_sampling="uniform"))
    shape = (64, 4, 16, 16)
    offset = objective.noise(shape, torch.Generator().manual_seed(6), "cpu")
    base = plain.noise(shape, torch.Generator().manual_seed(6), "cpu")
    difference = offset - base
    # constant over each sample's channel, with std 0.5 across samples and channels
    assert (difference - difference[..., :1, :1]).abs().max().item() < 1e-6
    assert difference[..., 0, 0].std().item() == pytest.approx(0.5, rel=0.15)


TORCH_LOSSES = {
    "mse": lambda e, delta: e.square(),
    "l1": lambda e, delta: e.abs(),
    "huber": lambda e, delta: torch.nn.functional.huber_loss(e, torch.zeros_like(e), reduction="none", delta=delta),
    "smooth_l1": lambda e, delta: torch.nn.functional.smooth_l1_loss(
        e, torch.zeros_like(e), reduction="none", beta=delta
    ),
}


@pytest.mark.parametrize("kind", LOSSES)
@pytest.mark.parametrize("name", ["eps", "rectified_flow"])
def test_each_loss_choice_is_torchs_loss_of_the_native_error(kind, name):
    ms = SAMPLINGS[name]()
    objective = Objective(ms, ObjectiveSpec(timestep_sampling="uniform", loss=kind, huber_delta=0.3))
    generator, x0, sigma, x_t, target = noisy_batch(objective, 4, seed=3)
    prediction = target + 0.5 * torch.randn(target.shape, generator=generator)  # errors on both sides of 0.3
    loss = objective.loss(ms.calculate_denoised(sigma, prediction, x_t), x0, sigma)
    expected = TORCH_LOSSES[kind](prediction - target, 0.3).flatten(1).mean(1)
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.one_host(
    "the loss choices are EriDiffusion's own (test_each_loss_choice_is_torchs_loss_of_the_native_error on both hosts)"
)
@pytest.mark.parametrize("kind", [k for k in LOSSES if k != "mse"])  # mse: every other training test
def test_each_loss_choice_trains_and_is_recorded_in_the_saved_file(kind, dog_dataset, tmp_path):
    import json

    import safetensors

    from devkit.tiny_models import build_tiny
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.data.training_data import build_training_data
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.trainer import train_lora

    model, clip, vae = build_tiny("sd15", seed=0)
    with torch.inference_mode():
        data = build_training_data(dog_dataset, vae, clip, 64, str(tmp_path / "cache"))
    data.samples = data.samples[:4]
    config = TrainConfig(
        steps=150,
        learning_rate=3e-3,
        dtype="fp32",
        gradient_checkpointing=False,
        seed=0,
        log_every=50,
        adapter=AdapterSpec(rank=8, alpha=8.0, targets="all-linear"),
        objective=ObjectiveSpec(loss=kind, huber_delta=0.1),
        run_name=f"loss_{kind}",
    )
    with torch.inference_mode(False):
        result = train_lora(model, data, config, str(tmp_path / "run"))
    assert result.eval_loss_after < 0.7 * result.eval_loss_before, (result.eval_loss_before, result.eval_loss_after)
    path = result.lora.save(str(tmp_path / "lora.safetensors"))
    with safetensors.safe_open(path, "pt") as f:
        recorded = json.loads(f.metadata()["training_config"])["objective"]
    assert (recorded["loss"], recorded["huber_delta"]) == (kind, 0.1)
