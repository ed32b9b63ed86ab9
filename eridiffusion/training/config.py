"""Training settings: one frozen, validated dataclass that the nodes and the YAML runner both build."""
from dataclasses import dataclass, fields

import torch

from .adapters import AdapterSpec
from .errors import EriDiffusionError
from .non_finite import ON_NAN
from .objective import ObjectiveSpec
from .optimizers import OPTIMIZERS

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
LR_SCHEDULES = ("constant", "cosine")
CUDA_GRAPHS = ("auto", "on", "off")
# 255 bytes (the usual file-name limit) less the longest name a run writes after it:
# "<run_name>_step1000000.training_state".
MAX_RUN_NAME_BYTES = 255 - len("_step1000000.training_state")


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 500
    learning_rate: float = 1e-4
    text_encoder_lr: float = 0.0        # > 0 also trains the text encoder(s), at this learning rate
    adapter: AdapterSpec = AdapterSpec()
    objective: ObjectiveSpec = ObjectiveSpec()  # timestep sampling ("auto": the family's), loss weighting, noise offset
    guidance: float = -1.0              # guidance input of guidance-distilled models; < 0: the family's default
    bypass_guidance_embedding: bool = False  # train with the guidance embedding skipped (no guidance input)
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
    weights_vram_gib: float = 0.0       # > 0: keep at most this much of the frozen weights on the device and
                                        # stream the rest from CPU memory each step (needs gradient_checkpointing)
    torch_compile: bool = False         # torch.compile each block of the diffusion model (inductor)
    cuda_graphs: str = "auto"           # replay each micro-batch's forward+backward from a CUDA graph:
                                        # on, off, or auto (on for CUDA devices without text-encoder training)
    on_nan: str = "stop"                # a non-finite loss or gradient: stop the run naming the step, or
                                        # skip that step's update (many in a row still stop it)
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
        if self.weights_vram_gib < 0:
            raise EriDiffusionError("weights_vram_gib cannot be negative (0: the whole model on the device).")
        if self.weights_vram_gib > 0 and not self.gradient_checkpointing:
            raise EriDiffusionError("weights_vram_gib > 0 streams weights block by block, which only saves memory with "
                                    "gradient_checkpointing on (else backward keeps every streamed weight): turn "
                                    "gradient_checkpointing on.")
        if self.cuda_graphs not in CUDA_GRAPHS:
            raise EriDiffusionError(f"cuda_graphs '{self.cuda_graphs}' unknown; choose one of {CUDA_GRAPHS}.")
        if self.on_nan not in ON_NAN:
            raise EriDiffusionError(f"on_nan '{self.on_nan}' unknown; choose one of {ON_NAN}.")
        if self.dtype not in DTYPES:
            raise EriDiffusionError(f"dtype '{self.dtype}' unknown; choose one of {tuple(DTYPES)}.")
        if min(self.warmup_steps, self.save_every, self.keep_last, self.weight_decay, self.max_grad_norm,
               self.text_encoder_lr) < 0:
            raise EriDiffusionError("warmup_steps, save_every, keep_last, weight_decay, max_grad_norm and "
                                    "text_encoder_lr cannot be negative.")
        if not self.run_name or any(c in self.run_name for c in "/\\\0") or self.run_name.startswith("."):
            raise EriDiffusionError(f"run_name {self.run_name!r} must be a plain folder name (no slashes or NUL, "
                                    "not starting with a dot).")
        if len(self.run_name.encode()) > MAX_RUN_NAME_BYTES:
            raise EriDiffusionError(f"run_name is {len(self.run_name.encode())} bytes long; its checkpoint names "
                                    f"must fit the file system's 255, so keep it to {MAX_RUN_NAME_BYTES} bytes.")

    @property
    def torch_dtype(self):
        return DTYPES[self.dtype]

    def as_dict(self):
        """Plain values for metadata and the run's config file."""
        nested = ("adapter", "objective")
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in nested}
        for name in nested:
            value = getattr(self, name)
            out[name] = {f.name: getattr(value, f.name) for f in fields(value)}
        return out
