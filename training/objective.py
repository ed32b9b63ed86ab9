"""The training objective, derived from the model's own ComfyUI `model_sampling`.

ComfyUI's `apply_model` returns the denoised estimate x̂0 = skip(σ)·x_t + c(σ)·output, with
`output` the network's native prediction (ε, v, flow velocity, …). Dividing the x0 error by
c(σ) gives the error in that native parameterization, so one formula serves every
prediction type, and the target T satisfies calculate_denoised(σ, T, x_t) == x0.
"""
import torch


class Objective:
    def __init__(self, model_sampling):
        self.model_sampling = model_sampling

    def sample_sigmas(self, batch, generator, device):
        """Timesteps uniform over the model's own schedule (discrete t for ε/v models, flow time
        for rectified flow), returned as sigmas."""
        ms = self.model_sampling
        t_lo = ms.timestep(ms.sigma_min.reshape(1)).float()
        t_hi = ms.timestep(ms.sigma_max.reshape(1)).float()
        u = torch.rand(batch, generator=generator, device=generator.device)
        return ms.sigma((t_lo + u.to(t_lo.device) * (t_hi - t_lo))).to(device, torch.float32)

    def noisy_latent(self, x0, noise, sigma):
        """x_t in ComfyUI's convention for this model (the input `apply_model` expects)."""
        return self.model_sampling.noise_scaling(sigma, noise, x0, max_denoise=False)

    def _output_scale(self, sigma, ndim):
        shape = (sigma.shape[0],) + (1,) * (ndim - 1)
        ones = torch.ones(shape, device=sigma.device, dtype=torch.float32)
        return self.model_sampling.calculate_denoised(sigma, ones, torch.zeros_like(ones))

    def native_target(self, x0, x_t, sigma):
        """The network output that would denoise x_t exactly to x0 (ε, v, velocity …)."""
        skip = self.model_sampling.calculate_denoised(sigma, torch.zeros_like(x_t), x_t)
        return (x0 - skip) / self._output_scale(sigma, x0.ndim)

    def loss(self, denoised, x0, sigma):
        """Per-sample mean squared error in the native parameterization, shape (batch,)."""
        error = (denoised.float() - x0.float()) / self._output_scale(sigma, x0.ndim)
        return error.square().flatten(1).mean(dim=1)
