"""The optimizers a LoRA run can choose, built by name over the parameter groups of what it trains
(trained/: one per block_lr multiplier, and the text encoder's), and a one-step check that the chosen
one really runs on the training device before any training work starts."""

import warnings

import torch

from ...errors import EriDiffusionError

OPTIMIZERS = ("AdamW", "AdamW8bit", "PagedAdamW", "PagedAdamW8bit", "Prodigy", "Adafactor", "Lion", "Lion8bit")

# Our name is the class name in bitsandbytes.optim.
_BITSANDBYTES = ("AdamW8bit", "PagedAdamW", "PagedAdamW8bit", "Lion", "Lion8bit")

# On a CPU (torch 2.14, bitsandbytes 0.50.2, prodigyopt 1.1.2, transformers 5.23) AdamW, AdamW8bit,
# Lion, Lion8bit, Prodigy and Adafactor step and train. PagedAdamW and PagedAdamW8bit do not raise
# there: bitsandbytes warns "Paged optimizers are not supported on CPU. Falling back to non-paged
# optimizer behavior." and runs the unpaged optimizer, so check_optimizer_runs refuses them off CUDA.


def make_optimizer(name, params, lr, weight_decay, device):
    """The optimizer `name` over `params`; optional libraries are imported only when chosen."""
    device = torch.device(device)
    if name == "AdamW":
        # fused: one kernel for all parameters, and its step counters stay on the device (the
        # foreach path reads each one back to the host every step)
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=device.type in ("cuda", "cpu"))
    if name in _BITSANDBYTES:
        import bitsandbytes

        return getattr(bitsandbytes.optim, name)(params, lr=lr, weight_decay=weight_decay)
    if name == "Prodigy":
        # Prodigy estimates the step size itself and lr multiplies that estimate: LoRA runs pass lr=1.0.
        # safeguard_warmup and use_bias_correction are what kohya's docs advise for Prodigy with a warmup.
        # It estimates one step size for all groups and fails at its first step when their non-zero
        # lrs differ: refuse that now, with the fix.
        params = list(params)
        rates = {group.get("lr", lr) if isinstance(group, dict) else lr for group in params} - {0}
        if len(rates) > 1:
            raise EriDiffusionError(
                f"optimizer Prodigy needs one learning rate for every parameter group (got "
                f"{sorted(rates)}): give the text encoder the model's learning rate (1.0) or 0."
            )
        import prodigyopt

        return prodigyopt.Prodigy(
            params, lr=lr, weight_decay=weight_decay, safeguard_warmup=True, use_bias_correction=True
        )
    if name == "Adafactor":
        # A fixed-lr Adafactor, as kohya uses it for LoRA: its own relative step and parameter
        # scaling would override the schedule the user chose.
        from transformers.optimization import Adafactor

        return Adafactor(
            params, lr=lr, weight_decay=weight_decay, relative_step=False, scale_parameter=False, warmup_init=False
        )
    raise _unknown(name)


def check_optimizer_runs(name, device):
    """One step of `name` on a dummy parameter on `device`; raises EriDiffusionError if it cannot run."""
    if name not in OPTIMIZERS:
        raise _unknown(name)
    device = torch.device(device)
    try:
        # 64x64 = 4096 elements: the smallest tensor bitsandbytes keeps 8-bit state for, so the
        # 8-bit kernels are the ones exercised. A zero start makes any update visible.
        param = torch.nn.Parameter(torch.zeros(64, 64, device=device))
        grad = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
        with warnings.catch_warnings():
            # bitsandbytes warns instead of raising when it runs something other than what was named
            # (paged state on a CPU): that is not the optimizer the user chose.
            warnings.filterwarnings("error", category=UserWarning, module=r"bitsandbytes\b")
            optimizer = make_optimizer(name, [param], 1e-3, 0.01, device)
            param.grad = grad.to(device)
            optimizer.step()
        stepped = param.detach()
        if not bool(torch.isfinite(stepped).all()):
            raise RuntimeError("one step produced non-finite values")
        if not bool((stepped != 0).any()):
            raise RuntimeError("one step left the parameter unchanged")
    except Exception as error:
        detail = (str(error).strip().splitlines() or [""])[0]
        unpaged = name[len("Paged") :] if name.startswith("Paged") else "AdamW"
        instead = "AdamW" if unpaged == "AdamW" else f"{unpaged} (the same without paging) or AdamW"
        raise EriDiffusionError(
            f"optimizer {name} cannot run on {device.type}: {type(error).__name__}: {detail} "
            f"Choose another optimizer, e.g. {instead}."
        ) from error


def _unknown(name):
    return EriDiffusionError(f"optimizer '{name}' unknown; choose one of {', '.join(OPTIMIZERS)}.")


# learning_rate's declared maximum is Prodigy's (its rate multiplies its own step estimate); every other
# optimizer steps by the rate itself, and a LoRA diverges far below this.
MAX_STEP_RATE = 1.0


def check_learning_rates(config, prodigy_maximum):
    """The TrainConfig's rates for its optimizer: at most MAX_STEP_RATE but for Prodigy (up to
    `prodigy_maximum`, learning_rate's declared bound), and one rate for all adapters with Prodigy."""
    if config.optimizer != "Prodigy" and config.learning_rate > MAX_STEP_RATE:
        raise EriDiffusionError(
            f"learning_rate {config.learning_rate:g} is above {MAX_STEP_RATE:g}, the most {config.optimizer} takes "
            "(it steps by the rate itself; LoRA trains at about 1e-4); only Prodigy, whose rate multiplies its "
            f"own step estimate, takes up to {prodigy_maximum:g} (at 1.0 usually)."
        )
    if config.optimizer == "Prodigy" and config.block_lr.strip():
        raise EriDiffusionError("Prodigy needs one learning rate for all adapters: clear block_lr.")
    if config.optimizer == "Prodigy" and config.text_encoder_lr not in (0.0, config.learning_rate):
        raise EriDiffusionError(
            "Prodigy needs one learning rate for all adapters: set text_encoder_lr to "
            f"{config.learning_rate:g} (the learning_rate) or 0."
        )
