"""How a full fine-tune's trained weights are held (fine_tune_dtype), whether the processes of a run split
them (sharding: trained/sharded.py), and how an update lands in bf16 ones (stochastic_rounding): the
optimizer steps a bf16 tensor over an fp32 copy of it, and the result is rounded to one of its two bf16
neighbours at random, the nearer more often (as OneTrainer and kohya's fused Adafactor round): an update
smaller than bf16's spacing moves the weight on average instead of being rounded away."""

from dataclasses import dataclass

import torch

from ...settings import check_settings, setting

FINE_TUNE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
SHARDINGS = ("none", "fsdp")


@dataclass(frozen=True)
class PrecisionSpec:
    """The settings of how the trained weights are held (TrainConfig's `precision`)."""

    fine_tune_dtype: str = setting(
        "fp32",
        "algorithm full: the dtype its trained copies of the model's weights are held and stepped in. fp32: a "
        "master copy (4 bytes a weight; SDXL's UNet 10 GB); bf16: 2 bytes (5 GB), the optimizer stepping each "
        "tensor over a temporary fp32 copy and rounding as stochastic_rounding says, its state kept in fp32. "
        "Adapters (lora, ...) always keep fp32.",
        choices=tuple(FINE_TUNE_DTYPES),
        group="memory",
    )
    sharding: str = setting(
        "none",
        "algorithm full in a run of several processes (eridiffusion train --gpus N, torchrun): fsdp splits the "
        "trained weights, their gradients and the optimizer's state over the processes (PyTorch FSDP2), each GPU "
        "holding 1/N of them, for a model whose fine-tune does not fit one GPU (Flux.1-dev: 16 bytes a weight with "
        "AdamW); checkpoints keep the optimizer's state as a folder of shards. none: every process holds them all.",
        choices=SHARDINGS,
        group="memory",
        optional=True,
    )
    stochastic_rounding: bool = setting(
        True,
        "Weights held in bf16 (fine_tune_dtype bf16): round each update to a bf16 neighbour at random, the "
        "nearer more often, so that updates smaller than bf16's spacing still move the weights (OneTrainer's "
        "default). Off: round to nearest, which drops them. No effect on fp32 weights (adapters, fp32 fine-tunes).",
        group="optimizer",
        optional=True,
    )

    def __post_init__(self) -> None:
        check_settings(self, "precision")

    @property
    def torch_dtype(self) -> torch.dtype:
        return FINE_TUNE_DTYPES[self.fine_tune_dtype]


def round_stochastically_(target: torch.Tensor, value: torch.Tensor, generator: torch.Generator | None = None) -> None:
    """`target` (bf16) ← fp32 `value` rounded to the bf16 below or above it, the one above with the chance
    of `value`'s distance from the one below over their spacing: random low 16 bits added to the fp32 bits,
    which are then cut to bf16's 16 (a carry into them rounds up); unbiased."""
    bits = torch.randint(0, 1 << 16, value.shape, dtype=torch.int32, device=value.device, generator=generator)
    bits.add_(value.view(torch.int32)).bitwise_and_(-65536)  # (-65536: 0xFFFF0000 as an int32)
    target.copy_(bits.view(torch.float32))


class StochasticRounding:
    """Hooks on `optimizer` that step its bf16 tensors over fp32 copies of them (their gradients and state
    in fp32 too) and round the results back with round_stochastically_, drawing from `generator`: whatever
    tensors a step takes (all of them, or the fused backward's one)."""

    def __init__(self, optimizer: torch.optim.Optimizer, generator: torch.Generator) -> None:
        self.generator = generator
        self.held: list[tuple[torch.nn.Parameter, torch.Tensor, torch.Tensor]] = []  # (tensor, bf16 data, grad)
        self.handles = [
            optimizer.register_step_pre_hook(self._to_fp32),
            optimizer.register_step_post_hook(self._round_back),
        ]

    @torch.no_grad()
    def _to_fp32(self, optimizer, args, kwargs) -> None:
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.dtype != torch.bfloat16 or param.grad is None:
                    continue
                data, grad = param.data, param.grad
                param.grad = None  # (a gradient must match its tensor's dtype)
                param.data = data.float()
                param.grad = grad.float()
                for name, state in optimizer.state.get(param, {}).items():  # (a resumed state is loaded in bf16)
                    if name != "step" and torch.is_tensor(state) and state.dtype == torch.bfloat16:
                        optimizer.state[param][name] = state.float()
                self.held.append((param, data, grad))

    @torch.no_grad()
    def _round_back(self, optimizer, args, kwargs) -> None:
        for param, data, grad in self.held:
            round_stochastically_(data, param.data, self.generator)
            param.grad = None
            param.data = data
            param.grad = grad
        self.held = []

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def stochastic_rounding_for(
    optimizer: torch.optim.Optimizer, parameters: list[torch.nn.Parameter], spec: PrecisionSpec, seed: int
) -> StochasticRounding | None:
    """StochasticRounding on `optimizer` where `spec` asks for it and some of `parameters` are bf16, its draws
    seeded by `seed` (a resumed run draws afresh); None where every one is fp32 (adapters, an fp32
    fine-tune: their updates are not rounded to bf16)."""
    bf16 = [p for p in parameters if p.dtype == torch.bfloat16]
    if not spec.stochastic_rounding or not bf16:
        return None
    return StochasticRounding(optimizer, torch.Generator(bf16[0].device).manual_seed(seed))
