"""Training settings: one frozen, validated dataclass that the nodes and the YAML runner both build."""
from dataclasses import dataclass, fields

import torch

from .adapters import AdapterSpec
from .errors import EriDiffusionError
from .optimizers import OPTIMIZERS

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
LR_SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 500
    learning_rate: float = 1e-4
    text_encoder_lr: float = 0.0        # > 0 also trains the text encoder(s), at this learning rate
    adapter: AdapterSpec = AdapterSpec()
    batch_size: int = 1
    grad_accum: int = 1
    optimizer: str = "AdamW"
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0          # 0 turns clipping off
    lr_schedule: str = "constant"
    warmup_steps: int = 0
    seed: int = 0
    dtype: str = "bf16"                 # compute dtype of the frozen model; adapters keep fp32 masters
    gradient_checkpointing: bool = False
    save_every: int = 0                 # 0: save only at the end
    keep_last: int = 0                  # keep only the newest N periodic checkpoints (0: all)
    run_name: str = "eridiffusion_lora"
    log_every: int = 10                 # steps between loss read-backs (each one is a device sync)
    eval_timesteps: int = 8             # fixed (noise, timestep) pairs per image for the evaluation loss
    eval_images: int = 8                # the first N images make the evaluation set

    def __post_init__(self):
        positive = ("steps", "batch_size", "grad_accum", "log_every", "eval_timesteps", "eval_images")
        for name in positive:
            if getattr(self, name) < 1:
                raise EriDiffusionError(f"{name} must be at least 1 (got {getattr(self, name)}).")
        if self.optimizer not in OPTIMIZERS:
            raise EriDiffusionError(f"optimizer '{self.optimizer}' unknown; choose one of {OPTIMIZERS}.")
        top = 10.0 if self.optimizer == "Prodigy" else 1.0  # Prodigy's lr multiplies its own estimate
        if not 0 < self.learning_rate <= top:
            raise EriDiffusionError(f"learning_rate {self.learning_rate} is outside (0, {top:g}]; LoRA uses ~1e-4 "
                                    "(Prodigy: 1.0).")
        if self.optimizer == "Prodigy" and self.text_encoder_lr not in (0.0, self.learning_rate):
            raise EriDiffusionError("Prodigy needs one learning rate for all adapters: set text_encoder_lr to "
                                    f"{self.learning_rate:g} (the learning_rate) or 0.")
        if self.lr_schedule not in LR_SCHEDULES:
            raise EriDiffusionError(f"lr_schedule '{self.lr_schedule}' unknown; choose one of {LR_SCHEDULES}.")
        if self.dtype not in DTYPES:
            raise EriDiffusionError(f"dtype '{self.dtype}' unknown; choose one of {tuple(DTYPES)}.")
        if min(self.warmup_steps, self.save_every, self.keep_last, self.weight_decay, self.max_grad_norm,
               self.text_encoder_lr) < 0:
            raise EriDiffusionError("warmup_steps, save_every, keep_last, weight_decay, max_grad_norm and "
                                    "text_encoder_lr cannot be negative.")
        if not self.run_name or any(c in self.run_name for c in "/\\") or self.run_name.startswith("."):
            raise EriDiffusionError(f"run_name '{self.run_name}' must be a plain folder name (no slashes, "
                                    "not starting with a dot).")

    @property
    def torch_dtype(self):
        return DTYPES[self.dtype]

    def as_dict(self):
        """Plain values for metadata and the run's config file."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "adapter"}
        out["adapter"] = {f.name: getattr(self.adapter, f.name) for f in fields(self.adapter)}
        return out
