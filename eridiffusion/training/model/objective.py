"""The training objective, derived from the model's own ComfyUI `model_sampling`: which noise
levels are drawn, the noisy input, the target and the loss weighting.

ComfyUI's `apply_model` returns the denoised estimate x̂0 = skip(σ)·x_t + c(σ)·output, with
`output` the network's native prediction (ε, v, flow velocity, …). Dividing the x0 error by
c(σ) gives the error in that native parameterization, so one formula serves every
prediction type, and the target T satisfies calculate_denoised(σ, T, x_t) == x0.
"""

import math
from dataclasses import dataclass

import torch

from ...errors import EriDiffusionError
from ...settings import check_settings, setting

TIMESTEP_SAMPLINGS = ("auto", "uniform", "logit_normal", "sigmoid", "shift")
LOSS_WEIGHTINGS = ("none", "min_snr")
LOSSES = ("mse", "l1", "huber", "smooth_l1")

# Flux's resolution-dependent shift: mu grows linearly with the number of image tokens,
# from 0.5 at 256 tokens to 1.15 at 4096 (diffusers' FlowMatch scheduler, kohya's flux_shift).
_FLUX_SHIFT_POINTS = ((256, 0.5), (4096, 1.15))


@dataclass(frozen=True)
class ObjectiveSpec:
    """How noise levels are drawn and the loss weighted. "auto" takes the family's default."""

    timestep_sampling: str = setting(
        "auto",
        "auto: the family's default. uniform; logit_normal (SD3); sigmoid (t = sigmoid(scale·N)); shift "
        "(sigmoid, then shifted to more noise; flow models only).",
        choices=TIMESTEP_SAMPLINGS,
        group="objective",
    )
    logit_mean: float = setting(
        0.0,
        "logit_normal: mean of logit(t); > 0 favours more noise.",
        minimum=-5.0,
        maximum=5.0,
        step=0.05,
        group="objective",
    )
    logit_std: float = setting(
        1.0, "logit_normal: spread of logit(t).", minimum=0.05, maximum=5.0, step=0.05, group="objective"
    )
    sigmoid_scale: float = setting(
        1.0, "sigmoid and shift: scale of the normal draw.", minimum=0.05, maximum=10.0, step=0.05, group="objective"
    )
    shift: float = setting(
        0.0,
        "shift: sigma = s·t / (1 + (s-1)·t); 0: s from the image size, as Flux does.",
        minimum=0.0,
        maximum=100.0,
        step=0.05,
        group="objective",
    )
    loss_weighting: str = setting(
        "none", "min_snr: min-SNR-γ weighting (ε and v models only).", choices=LOSS_WEIGHTINGS, group="objective"
    )
    min_snr_gamma: float = setting(5.0, "γ of min_snr.", minimum=0.1, maximum=100.0, step=0.1, group="objective")
    noise_offset: float = setting(
        0.0,
        "Offset noise (per sample and channel): helps very dark/bright images; ~0.05.",
        minimum=0.0,
        maximum=1.0,
        step=0.01,
        group="objective",
    )
    timestep_min: float = setting(
        0.0,
        "Train only on noise levels from this fraction of the schedule up (0: the least noise; ε/v models: "
        "fraction of the timesteps, flow models: σ). The sampling's distribution is cut to the range.",
        minimum=0.0,
        maximum=1.0,
        step=0.01,
        group="objective",
        optional=True,
    )
    timestep_max: float = setting(
        1.0,
        "Train only on noise levels up to this fraction of the schedule (1: pure noise). E.g. 0–0.5 for "
        "details and texture, 0.5–1 for composition.",
        minimum=0.0,
        maximum=1.0,
        step=0.01,
        group="objective",
        optional=True,
    )

    loss: str = setting(
        "mse",
        "How the prediction's error counts: mse (squared); l1 (absolute); huber (squared below huber_delta, "
        "linear above: outliers pull less); smooth_l1 (huber divided by huber_delta).",
        choices=LOSSES,
        group="objective",
        optional=True,
    )
    huber_delta: float = setting(
        1.0,
        "huber and smooth_l1: where the error turns from squared to linear.",
        minimum=0.001,
        maximum=10.0,
        step=0.001,
        group="objective",
        optional=True,
    )

    def __post_init__(self):
        check_settings(self, "objective")
        if self.timestep_max - self.timestep_min < 0.01:
            raise EriDiffusionError(
                f"objective: timestep_min {self.timestep_min:g} must be below timestep_max {self.timestep_max:g} "
                "(by 0.01 at least); 0 and 1 train on the whole schedule."
            )

    @property
    def full_range(self):
        return self.timestep_min == 0.0 and self.timestep_max == 1.0


def is_flow(model_sampling):
    """Rectified flow (x_t = (1-σ)·x0 + σ·ε, σ in [0, 1]): SD3, Flux, Wan, …"""
    import comfy.model_sampling

    return isinstance(model_sampling, comfy.model_sampling.CONST)


def resolution_shift(tokens):
    """Flux's shift factor exp(mu) for an image of `tokens` patches."""
    (x1, y1), (x2, y2) = _FLUX_SHIFT_POINTS
    mu = y1 + (tokens - x1) * (y2 - y1) / (x2 - x1)
    return math.exp(mu)


def shifted(t, shift):
    """σ = s·t / (1 + (s-1)·t): more weight on high noise for s > 1 (SD3's time shift)."""
    return shift * t / (1 + (shift - 1) * t)


def unshifted(sigma, shift):
    """The inverse of shifted: t with shifted(t, shift) == sigma."""
    return sigma / (shift - (shift - 1) * sigma)


def _logit(x):
    return -math.inf if x <= 0 else (math.inf if x >= 1 else math.log(x / (1 - x)))


def sigmas_of_timesteps(model_sampling, timesteps):
    """`model_sampling.sigma` of each of `timesteps` (a tensor). ComfyUI's Cosmos rectified-flow
    sampling (Cosmos-Predict2) takes one timestep at a time (a Python `if` caps it at sigma_max), so
    for it that formula is applied elementwise: σ = t / (1 - t), sigma_max from its cap on."""
    import comfy.model_sampling

    cosmos = getattr(comfy.model_sampling, "ModelSamplingCosmosRFlow", None)  # (older hosts lack it)
    if cosmos is None or not isinstance(model_sampling, cosmos):
        return model_sampling.sigma(timesteps)
    sigma_max = model_sampling.sigma_max.to(timesteps.device, timesteps.dtype)
    return torch.where(timesteps >= sigma_max / (sigma_max + 1), sigma_max, timesteps / (1 - timesteps))


def _normal_cdf(z):
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def sample_fractions(spec, batch, generator, tokens=None):
    """Draw `batch` values in (0, 1) from the spec's distribution, on the generator's device: the
    flow time σ for flow models, the fraction of the discrete schedule for ε/v models. With a
    timestep range the distribution is cut to it (drawn from the normal restricted to the range's
    preimage, so the shape inside the range is kept)."""
    kind = spec.timestep_sampling
    if kind not in ("uniform", "logit_normal", "sigmoid", "shift"):
        raise EriDiffusionError(f"timestep_sampling '{kind}' must be resolved to a family default before training.")
    if kind == "shift" and spec.shift == 0 and tokens is None:
        raise EriDiffusionError("resolution-dependent shift needs the image's token count.")
    device = generator.device
    if kind == "uniform":
        u = torch.rand(batch, generator=generator, device=device)
        return u if spec.full_range else spec.timestep_min + (spec.timestep_max - spec.timestep_min) * u
    shift = (spec.shift if spec.shift > 0 else resolution_shift(tokens)) if kind == "shift" else 1.0
    # every sampling is t = sigmoid(mean + scale·z) for a standard normal z, then shifted
    mean, scale = (spec.logit_mean, spec.logit_std) if kind == "logit_normal" else (0.0, spec.sigmoid_scale)
    if spec.full_range:
        z = torch.randn(batch, generator=generator, device=device)
    else:
        low, high = (
            _normal_cdf((_logit(unshifted(bound, shift)) - mean) / scale)
            for bound in (spec.timestep_min, spec.timestep_max)
        )
        u = torch.rand(batch, generator=generator, device=device)
        z = torch.special.ndtri((low + (high - low) * u).clamp(1e-12, 1 - 1e-12))
    t = torch.sigmoid(mean + scale * z)
    return shifted(t, shift) if kind == "shift" else t


class Objective:
    def __init__(self, model_sampling, spec=ObjectiveSpec(timestep_sampling="uniform")):
        import comfy.model_sampling

        self.model_sampling, self.spec = model_sampling, spec
        self.flow = is_flow(model_sampling)
        self.v_prediction = isinstance(model_sampling, comfy.model_sampling.V_PREDICTION)
        if spec.timestep_sampling == "shift" and not self.flow:
            raise EriDiffusionError(
                "timestep_sampling 'shift' is for flow models (SD3, Flux, Wan, …); this model "
                "predicts ε or v: use uniform, logit_normal or sigmoid."
            )
        if spec.loss_weighting == "min_snr" and not isinstance(
            model_sampling, (comfy.model_sampling.EPS, comfy.model_sampling.V_PREDICTION)
        ):
            raise EriDiffusionError(
                "loss_weighting 'min_snr' is for ε and v-prediction models; flow models "
                "shape the loss through timestep_sampling instead (set loss_weighting to none)."
            )

    def sample_sigmas(self, batch, generator, device, tokens=None):
        """Noise levels for one batch, as sigmas in ComfyUI's convention for this model."""
        return self.sigmas_at(sample_fractions(self.spec, batch, generator, tokens), device)

    def spread_sigmas(self, count, device):
        """`count` fixed noise levels spread evenly over the trained range of the schedule (the middles
        of `count` equal parts): what validation measures at, the same every time."""
        low, high = self.spec.timestep_min, self.spec.timestep_max
        return self.sigmas_at(low + (high - low) * (torch.arange(count, dtype=torch.float32) + 0.5) / count, device)

    def sigmas_at(self, u, device):
        """Sigmas of schedule fractions `u` in (0, 1): the flow time σ itself for flow models, the
        fraction of the discrete schedule's timesteps for ε/v models."""
        ms = self.model_sampling
        # all on the schedule's device, with tensor bounds: no device→host sync in the step
        home = ms.sigma_min.device
        u = u.float().to(home)
        if self.flow:
            # σ is the flow time itself, kept inside the model's own schedule range
            return torch.minimum(torch.maximum(u, ms.sigma_min.float()), ms.sigma_max.float()).to(device)
        t_lo = ms.timestep(ms.sigma_min.reshape(1)).float()
        t_hi = ms.timestep(ms.sigma_max.reshape(1)).float()
        return sigmas_of_timesteps(ms, t_lo + u * (t_hi - t_lo)).to(device, torch.float32)

    def noise(self, shape, generator, device):
        """Gaussian noise, plus the spec's offset noise (one value per sample and channel)."""
        noise = torch.randn(shape, generator=generator, device=device)
        if self.spec.noise_offset > 0:
            offset = torch.randn(shape[:2] + (1,) * (len(shape) - 2), generator=generator, device=device)
            noise = noise + self.spec.noise_offset * offset
        return noise

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

    def weights(self, sigma):
        """Per-sample loss weights, shape (batch,): ones, or min-SNR-γ (SNR = 1/σ² in ComfyUI's σ)."""
        if self.spec.loss_weighting == "none":
            return torch.ones_like(sigma, dtype=torch.float32)
        snr = 1.0 / sigma.float().square()
        clipped = snr.clamp(max=self.spec.min_snr_gamma)
        if self.v_prediction:
            return clipped / (snr + 1)
        return clipped / snr

    def elementwise(self, error):
        """The spec's loss of each element of the native-parameterization error."""
        kind, delta = self.spec.loss, self.spec.huber_delta
        if kind == "mse":
            return error.square()
        if kind == "l1":
            return error.abs()
        huber = torch.nn.functional.huber_loss(error, torch.zeros_like(error), reduction="none", delta=delta)
        return huber if kind == "huber" else huber / delta

    def loss(self, denoised, x0, sigma, mask=None):
        """Per-sample weighted mean of the spec's loss (mse by default) in the native parameterization,
        shape (batch,). `mask` (broadcast against x0, e.g. (batch, 1, h, w)) weighs each latent
        position; the mean is over all positions, so a position of weight 0 contributes nothing (and
        no gradient)."""
        error = (denoised.float() - x0.float()) / self._output_scale(sigma, x0.ndim)
        each = self.elementwise(error)
        if mask is not None:
            each = each * mask
        return each.flatten(1).mean(dim=1) * self.weights(sigma)
