"""Training settings: one frozen, validated dataclass that the nodes and the YAML runner both build.
Its fields' `group` says which node shows them: the trainer's face, or one of the options nodes."""

from dataclasses import dataclass, fields

import torch

from ...errors import EriDiffusionError
from ...settings import check_settings, setting, settings_of
from ..adapters import AdapterSpec
from ..adapters.layer_selection import parse_block_lr
from ..memory.swap_plan import check_swap_settings
from ..model.objective import ObjectiveSpec
from ..model.text_encoder import check_what_trains
from ..speed.paths import SpeedPaths
from .non_finite import MAX_SKIPS_IN_A_ROW, ON_NAN
from .optimizers import OPTIMIZERS, check_learning_rates
from .precision import PrecisionSpec

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
LR_SCHEDULES = ("constant", "cosine")
CUDA_GRAPHS = ("auto", "on", "off")


def device_choices(cuda_devices):
    """The `device` setting's choices on a machine with `cuda_devices` CUDA GPUs: auto, and each GPU
    by name where there are several to choose from (with one, auto is that GPU)."""
    return ("auto",) + (tuple(f"cuda:{i}" for i in range(cuda_devices)) if cuda_devices > 1 else ())


DEVICES = device_choices(torch.cuda.device_count())  # counts without starting CUDA
# 255 bytes (the usual file-name limit) less the longest name a run writes after it (<run_name>_step1000000…)
MAX_RUN_NAME_BYTES = 255 - len("_step1000000.training_state")


@dataclass(frozen=True)
class TrainConfig:
    """Every setting of a training run. Fields made with `setting(...)` are user-facing (their name,
    type, default, bounds and help text are the node inputs and config-file keys); the nested
    `adapter` and `objective` hold theirs the same way."""

    steps: int = setting(500, "Optimizer steps.", minimum=1, maximum=1000000, group="trainer")
    learning_rate: float = setting(
        1e-4,
        "Peak learning rate of the adapter: about 1e-4, at most 1 (Prodigy, which sets its own step: 1.0, at most 10).",
        minimum=1e-7,
        maximum=10.0,
        step=1e-6,
        group="trainer",
    )
    adapter: AdapterSpec = AdapterSpec()  # algorithm, rank, alpha on the trainer; the rest on AdapterOptions
    batch_size: int = setting(1, "Images per micro-batch (same bucket).", minimum=1, maximum=64, group="trainer")
    seed: int = setting(
        0, "Adapter init, batches and noise.", minimum=0, maximum=0xFFFFFFFF, group="trainer", seed=True
    )
    dtype: str = setting(
        "bf16",
        "Compute dtype of the frozen model; adapters keep fp32 master weights.",
        choices=tuple(DTYPES),
        group="trainer",
    )
    save_every: int = setting(
        0,
        "Write a checkpoint to output/<run_name>/checkpoints every N steps (0: at the end only).",
        minimum=0,
        maximum=1000000,
        group="trainer",
    )
    run_name: str = setting(
        "eridiffusion_lora", "Folder under ComfyUI's output for checkpoints, samples and the loss log.", group="trainer"
    )
    optimizer: str = setting(
        "AdamW",
        "8-bit and paged variants (bitsandbytes) save memory; Prodigy sets its own step "
        "size (use learning_rate 1.0). Checked on your device before training.",
        choices=OPTIMIZERS,
        group="optimizer",
    )
    lr_schedule: str = setting(
        "constant",
        "Learning rate after warmup: constant, or cosine decay to zero.",
        choices=LR_SCHEDULES,
        group="optimizer",
    )
    warmup_steps: int = setting(0, "Steps of linear warmup.", minimum=0, maximum=100000, group="optimizer")
    grad_accum: int = setting(1, "Micro-batches per optimizer step.", minimum=1, maximum=256, group="optimizer")
    text_encoder_lr: float = setting(
        0.0,
        "> 0 also trains the text encoder(s) at this learning rate (connect clip).",
        minimum=0.0,
        maximum=1.0,
        step=1e-6,
        group="optimizer",
    )
    weight_decay: float = setting(
        0.01, "Decoupled weight decay of the optimizer.", minimum=0.0, maximum=1.0, step=0.001, group="optimizer"
    )
    max_grad_norm: float = setting(
        1.0,
        "Gradients are clipped to this total norm (0: no clipping).",
        minimum=0.0,
        maximum=1000.0,
        step=0.1,
        group="optimizer",
    )
    block_lr: str = setting(
        "",
        "Learning-rate multipliers per block of the diffusion model, e.g. 'input:0.5,middle:1,output:1' "
        "(SD/SDXL), 'double:1,single:0.5' (Flux), 'blocks.0-9:0.5' (a block list with an index range). "
        "Unlisted blocks: 1. Empty: one rate.",
        group="optimizer",
        optional=True,
    )
    gradient_checkpointing: bool = setting(
        True, "Recompute block activations in backward: much less memory, somewhat slower.", group="memory"
    )
    weights_vram_gib: float = setting(
        0.0,
        "0: the whole model on the GPU. > 0: keep at most this many GiB of its weights there and stream the rest "
        "from CPU memory every step (ComfyUI's partial loading; needs gradient_checkpointing; slower, for small GPUs).",
        minimum=0.0,
        maximum=1024.0,
        step=0.5,
        group="memory",
    )
    torch_compile: bool = setting(
        False,
        "torch.compile (inductor) each block of the model: blocks of one kind share a "
        "compiled graph. Faster GPU kernels after a one-time compile.",
        group="memory",
    )
    cuda_graphs: str = setting(
        "auto",
        "Replay each step from a CUDA graph: on a fast GPU several times faster (the step is launch-bound "
        "otherwise). auto: on for CUDA with the weights loaded whole (weights_vram_gib 0) and plain tensor "
        "inputs; each image size/prompt length is captured once (a few seconds).",
        choices=CUDA_GRAPHS,
        group="memory",
    )
    fp8_compute: bool = setting(
        False,
        "Compute the large frozen products of the adapted layers in fp8 (forward and input gradient, "
        "per-tensor scales; Ada/Hopper GPUs), the adapters staying in the model's dtype and fp32. Measured on an "
        "H100, Flux.1-dev at 1024²: 8% faster with bf16 weights (+16 GiB for the fp8 copies), 15% faster with "
        "fp8_e4m3fn weights (+8 GiB); SDXL's layers are mostly too small to gain and compute as without it. "
        "The scaling runs in Triton kernels where Triton is installed (Linux), else slower. Samples and the "
        "saved LoRA are as without it.",
        group="memory",
    )
    device: str = setting(
        "auto",
        "The GPU this run trains on. auto: the one ComfyUI loads the MODEL on (its default GPU; the CPU "
        "without one). cuda:N, offered where the machine has several GPUs: that one, leaving ComfyUI's own "
        "work where it is. A run of the command line over several GPUs (--gpus, torchrun) needs auto.",
        choices=DEVICES,
        group="memory",
    )
    vram_budget_gib: float = setting(
        0.0,
        "0: no budget (the whole model on the GPU, or weights_vram_gib). > 0: the GPU memory in GiB this run may "
        "take (a 24 GB card alone: about 22). The model's blocks that do not fit stay in CPU memory and are "
        "copied in a block or two ahead of the compute (block swap); the plan is logged at the start and "
        "settled after the first step. Needs gradient_checkpointing and a CUDA GPU.",
        minimum=0.0,
        maximum=1024.0,
        step=0.5,
        group="memory",
    )
    blocks_to_swap: int = setting(
        0,
        "Advanced: keep this many of the model's blocks in CPU memory and copy them in ahead of the compute, "
        "whatever the memory (as musubi-tuner's --blocks_to_swap). 0: as vram_budget_gib plans.",
        minimum=0,
        maximum=1000,
        group="memory",
    )
    base_quantization: str = setting(
        "none",
        "The frozen model's linear layers held quantized by bitsandbytes for the run, as QLoRA trains: nf4 "
        "(4 bits a weight, about a quarter of bf16's memory) or int8 (half). The MODEL is not changed and the "
        "LoRA loads on the unquantized model. none: as loaded. Trains lora, loha and lokr; not with block swap, "
        "fp8_compute or CUDA graphs (auto turns them off).",
        choices=("none", "nf4", "int8"),
        group="memory",
    )
    fused_backward: bool = setting(
        False,
        "Step each trained tensor when its gradient is ready and free it (kohya's fused backward pass): saves the "
        "memory of every gradient at once (a full fine-tune's weights' size); clips per tensor. AdamW, AdamW8bit, "
        "Adafactor or Lion; not with fp16, on_nan skip, several GPUs or CUDA graphs.",
        group="memory",
    )
    keep_last: int = setting(
        0, "Keep only the newest N periodic checkpoints (0: keep all).", minimum=0, maximum=1000, group="checkpoint"
    )
    on_nan: str = setting(
        "stop",
        "A step whose loss or gradient is NaN/infinite (a diverged run): stop with an error "
        "naming the step and the likely cause, keeping the checkpoints written before it; or skip "
        "that step's update and go on (the count is in the summary; "
        f"{MAX_SKIPS_IN_A_ROW} in a row still stop).",
        choices=ON_NAN,
        group="checkpoint",
    )
    validate_every: int = setting(
        50,
        "With validation images (LoadDataset's validation fraction, or a validation folder into CacheLatents): "
        "measure the loss on them every N steps and at the end; the lowest is kept as checkpoints/best.safetensors.",
        minimum=1,
        maximum=1000000,
        group="validation",
    )
    early_stop_patience: int = setting(
        0,
        "End the run (saving it) when the validation loss has not improved for N checks in a row (0: never).",
        minimum=0,
        maximum=1000,
        group="validation",
    )
    ema_decay: float = setting(
        0.0,
        "> 0: keep an exponential moving average of the adapter weights (e.g. 0.999); samples, validation and "
        "the saved LoRA use it, and the trained weights are saved beside as *_raw.safetensors. 0: off.",
        minimum=0.0,
        maximum=0.99999,
        step=0.0001,
        group="extras",
    )
    ema_warmup: int = setting(
        0,
        "Steps over which the EMA's decay ramps up linearly from 0 to ema_decay (0: ema_decay from the start).",
        minimum=0,
        maximum=1000000,
        group="extras",
    )
    mask_min: float = setting(
        0.0,
        "Datasets with a masks/ folder: the loss weight where the mask is black (0: those parts teach nothing; "
        "grey parts weigh in between).",
        minimum=0.0,
        maximum=1.0,
        step=0.01,
        group="extras",
    )
    prior_weight: float = setting(
        1.0,
        "With regularization (class) images (CacheLatents' regularization_dataset): each training micro-batch "
        "comes with one of them, and their loss counts this much (DreamBooth's prior_loss_weight).",
        minimum=0.0,
        maximum=10.0,
        step=0.05,
        group="extras",
    )
    preservation_prompt: str = setting(
        "",
        "Differential output preservation: the class phrase without the trigger word (e.g. 'a photo of a dog'). "
        "Each step also pulls the adapted model's prediction for it, on the same noisy image, towards the "
        "model's own prediction with the adapter bypassed, so the class keeps its look. Needs the CLIP "
        "connected to LoRATrainer. Empty: off.",
        group="extras",
    )
    preservation_weight: float = setting(
        1.0,
        "Weight of the preservation loss against the training loss (with a preservation_prompt).",
        minimum=0.0,
        maximum=10.0,
        step=0.05,
        group="extras",
    )
    preservation_every: int = setting(
        1,
        "Steps between preservation losses, each weighted by this many so that on average it weighs "
        "preservation_weight. It costs a second forward and backward plus a forward with the adapter bypassed: "
        "every step about 2.2x a step's time on SDXL, every 3rd about 1.4x.",
        minimum=1,
        maximum=100,
        group="extras",
    )
    objective: ObjectiveSpec = ObjectiveSpec()  # timestep sampling ("auto": the family's), loss weighting, noise offset
    guidance: float = setting(
        -1.0,
        "-1: the family's default (Flux.1 dev, HunyuanVideo: 1.0). Guidance input of "
        "guidance-distilled models (Flux.1 dev, HunyuanVideo) during training; others ignore it.",
        minimum=-1.0,
        maximum=100.0,
        step=0.1,
        group="objective",
    )
    bypass_guidance_embedding: bool = setting(
        False, "Train with the guidance embedding skipped (Flux.1 dev: no guidance input).", group="objective"
    )
    expert_boundary: float = setting(
        0.0,
        "Two experts (LoRATrainer's low_noise_model connected: Wan 2.2 14B's high- and low-noise models): the "
        "noise level σ where the high-noise expert hands over to the low-noise one. 0: the family's (Wan 2.2 "
        "14B: 0.889, step 10 of 20 at shift 8, where ComfyUI's Wan 2.2 templates switch models).",
        minimum=0.0,
        maximum=0.99,
        step=0.001,
        group="objective",
        optional=True,
    )
    switch_boundary_every: int = setting(
        0,
        "Two experts: 0: each step trains the expert whose noise range the step's noise level falls in (drawn "
        "as timestep_sampling draws it); N: the experts take turns, N steps each from the high-noise one "
        "(ai-toolkit's switch_boundary_every). Each expert only ever trains on its own range.",
        minimum=0,
        maximum=100000,
        group="objective",
        optional=True,
    )
    video_loss_weight: float = setting(
        1.0,
        "Audio-video models (LTX-2 with CacheLatents' audio_vae): the weight of the video stream's mean loss.",
        minimum=0.0,
        maximum=10.0,
        step=0.05,
        group="objective",
        optional=True,
    )
    audio_loss_weight: float = setting(
        1.0,
        "Audio-video models (LTX-2 with CacheLatents' audio_vae): the weight of the audio stream's mean loss "
        "(0: the sound is only context).",
        minimum=0.0,
        maximum=10.0,
        step=0.05,
        group="objective",
        optional=True,
    )
    precision: PrecisionSpec = PrecisionSpec()  # fine_tune_dtype (MemoryOptions), stochastic_rounding (optimizer)
    log_every: int = 10  # steps between loss read-backs (each one is a device sync)
    eval_timesteps: int = 8  # fixed (noise, timestep) pairs per image for the evaluation loss
    eval_images: int = 8  # the first N images make the evaluation set
    speed: SpeedPaths = SpeedPaths()  # the step's speed paths (benchmarks switch one off); not a user setting

    def __post_init__(self):
        check_settings(self, "training")
        for name in ("log_every", "eval_timesteps", "eval_images"):
            if getattr(self, name) < 1:
                raise EriDiffusionError(f"{name} must be at least 1 (got {getattr(self, name)}).")
        check_learning_rates(self, settings_of(self)["learning_rate"].info.maximum)
        parse_block_lr(self.block_lr)  # the syntax now; the model's blocks when training starts
        check_what_trains(self)
        check_swap_settings(self)
        if self.weights_vram_gib > 0 and not self.gradient_checkpointing:
            raise EriDiffusionError(
                "weights_vram_gib > 0 streams weights block by block, which only saves memory with "
                "gradient_checkpointing on (else backward keeps every streamed weight): turn "
                "gradient_checkpointing on."
            )
        if not self.run_name or any(c in self.run_name for c in "/\\\0") or self.run_name.startswith("."):
            raise EriDiffusionError(
                f"run_name {self.run_name!r} must be a plain folder name (no slashes or NUL, not starting with a dot)."
            )
        if len(self.run_name.encode()) > MAX_RUN_NAME_BYTES:
            raise EriDiffusionError(
                f"run_name is {len(self.run_name.encode())} bytes long; its checkpoint names "
                f"must fit the file system's 255, so keep it to {MAX_RUN_NAME_BYTES} bytes."
            )

    @property
    def torch_dtype(self):
        return DTYPES[self.dtype]

    def as_dict(self):
        """Plain values for metadata and the run's config file (the speed paths left out: no number changes)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in (*NESTED, "speed")}
        for name in NESTED:  # (its settings as a mapping of their own)
            out[name] = {f.name: getattr(getattr(self, name), f.name) for f in fields(getattr(self, name))}
        return out


# The nested settings dataclasses and the TrainConfig field that holds each.
NESTED = {"adapter": AdapterSpec, "objective": ObjectiveSpec, "precision": PrecisionSpec}


def training_settings():
    """{name: Setting} of every user-facing setting of a run, flat, in the order the nodes show
    them: TrainConfig's own with its AdapterSpec's and ObjectiveSpec's in their fields' places
    (their names never clash)."""
    return settings_of(TrainConfig)


def train_config_from(values, connected=()):
    """The TrainConfig of flat setting `values` (names as training_settings(); the rest default) over those
    of each settings node `connected` to LoRATrainer (TrainingObjective, options nodes), run_name stripped."""
    values = {k: v for settings in (*connected, values) for k, v in settings.items()}
    values["run_name"] = values.get("run_name", "eridiffusion_lora").strip()
    unknown = sorted(set(values) - set(training_settings()) - {f.name for f in fields(TrainConfig)})
    if unknown:
        raise EriDiffusionError(f"unknown training setting(s): {', '.join(unknown)}.")
    nested = {
        field_name: cls(**{k: v for k, v in values.items() if k in settings_of(cls)})
        for field_name, cls in NESTED.items()
    }
    own = {k: v for k, v in values.items() if not any(k in settings_of(cls) for cls in NESTED.values())}
    return TrainConfig(**own, **nested)
