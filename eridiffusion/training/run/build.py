"""Building a run, nothing trained yet: the training clone of the MODEL, what is trained on it
(trained/: the adapters, fresh or from the resume file, and the text encoder's) and the injections
that speed or slim its steps, the optimizer with its schedule and loss scaler, the EMA, the data
order, and the progress a resume restores.

The inputs are never changed: training happens on clones, the trained change injected in bypass form.
In a run of several processes (distributed.py) every process builds the same run; rank 0's trained
weights are handed to the others, as DDP starts."""

import dataclasses
import random
import time
from typing import Any

import torch
from comfy.model_base import BaseModel
from comfy.model_patcher import ModelPatcher

from ...comfy_compat import trainable_model_clone
from ..data.batches import BatchSampler
from ..data.training_data import TrainingData
from ..memory import BlockSwap, QuantizedBase, block_swap_for, quantized_base_for
from ..model import loading as model_loading
from ..model.autograd_weights import frozen_weights_injection
from ..model.families import family_of, resolve_objective, resolve_targets
from ..model.family_row import Family
from ..model.objective import Objective
from ..model.text_encoder import TextEncoderTraining
from ..speed.checkpointing import checkpointing_injection
from ..speed.compile_blocks import compile_blocks_injection
from ..speed.cuda_graphs import release_graph_memory
from ..speed.fp8_products import Fp8Products
from ..trained import Trained, TrainedBuilder, TrainedSetup, trained_adapters
from . import run_state
from .background_writes import BackgroundWrites
from .config import TrainConfig
from .distributed import SINGLE_PROCESS, TrainingProcesses
from .ema import AdapterEMA
from .fused_backward import FusedBackward
from .lr_schedule import lr_factor
from .optimizers import make_optimizer
from .precision import StochasticRounding, stochastic_rounding_for
from .resume import ResumePoint
from .setup_clock import SetupClock


class TrainingRun:
    """One run's moving parts, built here and trained by trainer.train. `source` is the input MODEL
    as training sees it (the same weights; reloaded as a plain patcher where ComfyUI's dynamic VRAM
    manages the input), `patcher` the clone trained on, `trained` what is trained on it (trained/:
    `trained`, a TrainedBuilder, builds it; the adapters AdapterSpec asks for unless told otherwise)."""

    started: float  # time.perf_counter() when the run began to be built
    data: TrainingData
    config: TrainConfig
    run_dir: str
    processes: TrainingProcesses
    source: ModelPatcher
    owns_model: bool  # dynamic VRAM's reload for training: a model of the run's own, whose weights it may cast
    patcher: ModelPatcher
    base: BaseModel  # patcher.model
    device: torch.device
    fp8_products: Fp8Products | None  # fp8_compute: the fp8 weights of the adapted layers, kept for the run
    preservation: list[Any] | None  # differential output preservation: the class phrase's conditioning
    family: Family
    objective: Objective
    trained: Trained
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler
    ema: AdapterEMA | None
    batches: BatchSampler
    prior_batches: BatchSampler | None  # regularization (class) images, one micro-batch beside each training one
    choice: random.Random  # captions and dropout, host side
    noise_gen: torch.Generator
    progress: run_state.RunProgress
    evaluation_range: tuple[float, float]  # the noise levels the evaluation loss spreads over (an expert: its own)
    block_swap: BlockSwap | None  # vram_budget_gib, blocks_to_swap: the blocks' weights placed from host memory
    quantized_base: QuantizedBase | None  # base_quantization: the linear layers held by bitsandbytes
    setup: SetupClock  # the seconds of each setup phase (the summary's setup_phases)
    starts_from_base: bool  # a fresh run: what is trained starts as the identity (no file's weights)
    fused_backward: FusedBackward | None  # fused_backward: each tensor stepped as its gradient completes
    stochastic_rounding: StochasticRounding | None  # bf16 weights (fine_tune_dtype): updates rounded stochastically

    def __init__(
        self,
        model_patcher: ModelPatcher,
        data: TrainingData,
        config: TrainConfig,
        run_dir: str,
        clip: Any = None,  # the graph's CLIP (text-encoder training, preservation_prompt)
        resume: ResumePoint | None = None,
        processes: TrainingProcesses = SINGLE_PROCESS,
        trained: TrainedBuilder = trained_adapters,
    ) -> None:
        self.started = time.perf_counter()
        self.setup = SetupClock()
        self.between_steps = SetupClock()  # (checkpoints, validation: restarted by each)
        self.writes = BackgroundWrites(self.between_steps.phases)  # (its jobs' seconds among them)
        self.data, self.config, self.run_dir, self.processes = data, config, run_dir, processes
        self.source = trainable_model_clone(model_patcher)
        self.owns_model = self.source.model is not model_patcher.model
        self.patcher = self.source.clone()
        if config.device != "auto":  # another GPU than ComfyUI's; the result MODEL goes back to the input's
            self.patcher.load_device = torch.device(config.device)
        self.base, self.device = self.patcher.model, self.patcher.load_device
        self.setup.mark("clone", self.device)
        self.fp8_products = Fp8Products(config.speed.fp8_min_macs) if config.fp8_compute else None
        self.preservation = None
        if config.preservation_prompt.strip():
            with model_loading.as_comfyui_loads():  # the graph's own CLIP, loaded as ComfyUI loads it
                self.preservation = clip.encode_from_tokens_scheduled(clip.tokenize(config.preservation_prompt))
        self.family = family_of(self.base)
        self.objective = Objective(self.base.model_sampling, resolve_objective(config.objective, self.family))
        self.trained = self._trained(trained, clip, resume)
        self.starts_from_base = resume is None  # (no file's weights: the trained change starts as the identity)
        processes.broadcast_parameters(self.trained.parameters())  # as DDP starts: rank 0's weights everywhere
        self.optimizer, self.scheduler, self.scaler, self.ema = self._optimization()
        self._data_order()
        self.setup.mark("optimizer", self.device)
        self.progress = run_state.RunProgress()
        self.evaluation_range = (0.0, 1.0)
        if resume is not None and resume.state is not None:
            run_state.restore(self, resume.state, resume.path)

    @property
    def text_encoder(self) -> TextEncoderTraining | None:
        """The trained CLIP clone that encodes each step's captions, when the text encoder trains."""
        return self.trained.text_encoder

    def _trained(self, build: TrainedBuilder, clip: Any, resume: ResumePoint | None) -> Trained:
        """What the run trains, built by `build` (fresh, or from the resume file) on a clone with
        autograd-safe weights, then the step's injections."""
        config = self.config
        if self.base.get_dtype() != config.torch_dtype:
            held = self.owns_model and model_loading.hold_weights_in(self.base, config.torch_dtype)
            if not held:  # ComfyUI casts each weight in each forward
                self.patcher.set_model_compute_dtype(config.torch_dtype)
        self.setup.mark("weights_cast", self.device)
        frozen_weights_injection(self.patcher)
        # (before the adapters: their forwards wrap the quantized layer's)
        self.quantized_base = quantized_base_for(self.patcher, config, self.device)
        spec = resume.spec if resume is not None else config.adapter
        spec = dataclasses.replace(spec, targets=resolve_targets(spec.targets, self.family))
        trained = build(
            TrainedSetup(
                self.patcher,
                spec,
                config.seed,
                clip=clip if config.text_encoder_lr > 0 else None,
                encodings_on_device=config.speed.encodings_on_device,
                saved=resume.tensors if resume is not None else None,
                saved_path=resume.path if resume is not None else None,
                weights_dtype=config.precision.torch_dtype,
                compute_dtype=config.torch_dtype,
                group=self.processes.devices,
                originals_in_host_memory=not (
                    self.preservation is not None
                    or config.weights_vram_gib > 0
                    or config.vram_budget_gib > 0
                    or config.blocks_to_swap > 0
                ),
            )
        )
        if config.torch_compile:
            compile_blocks_injection(self.patcher)
        # (before checkpointing's: the blocks' swap wrappers sit inside, so the recomputation passes them)
        self.block_swap = block_swap_for(
            self.patcher, config, self.device, trained.parameters(), _activation_scale(self.data)
        )
        if config.gradient_checkpointing:
            checkpointing_injection(self.patcher, copy_saved=self.family.copies_saved_activations)
            if trained.text_encoder is not None:  # (the trained encoders' blocks, too)
                encoder = trained.text_encoder
                checkpointing_injection(encoder.clip.patcher, blocks=encoder.trained_blocks())
        self.setup.mark("trained_built", self.device)
        return trained

    def _optimization(
        self,
    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR, torch.amp.GradScaler, AdapterEMA | None]:
        """(optimizer, LR scheduler, loss scaler, EMA or None) of the trained parameters."""
        config = self.config
        groups = self.trained.parameter_groups(config.learning_rate, config.block_lr, config.text_encoder_lr)
        optimizer = make_optimizer(config.optimizer, groups, config.learning_rate, config.weight_decay, self.device)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(config))
        # fp16 gradients underflow without loss scaling; bf16 and fp32 need none (the scaler is then a no-op).
        scaler = torch.amp.GradScaler(self.device.type, enabled=config.dtype == "fp16" and self.device.type == "cuda")
        ema = None
        if config.ema_decay > 0:
            ema = AdapterEMA(self.trained.parameters(), config.ema_decay, config.ema_warmup)
        trained = self.trained.parameters()
        self.stochastic_rounding = stochastic_rounding_for(optimizer, trained, config.precision, config.seed + 4)
        self.fused_backward = None
        if config.fused_backward:  # (each tensor stepped in the backward)
            self.fused_backward = FusedBackward(optimizer, self.trained.parameters(), config.max_grad_norm)
        return optimizer, scheduler, scaler, ema

    def _data_order(self) -> None:
        """The batch samplers and the generators of captions, noise and noise levels."""
        config, data = self.config, self.data
        # the global micro-batch: every process draws it alike and trains its part (micro_batches.py)
        global_batch = config.batch_size * self.processes.world_size
        self.batches = BatchSampler(data, global_batch, config.seed)
        self.prior_batches = None
        if data.regularization is not None:
            self.prior_batches = BatchSampler(data.regularization, global_batch, config.seed + 3)
        self.choice = random.Random(config.seed + 1)
        self.noise_gen = torch.Generator(device=self.device).manual_seed(config.seed + 2)

    def release(self) -> None:
        """Hand the training clones back to ComfyUI so their injections come off the shared modules."""
        if self.fp8_products is not None:
            self.fp8_products.clear()
        model_loading.unload(self.patcher)
        if self.block_swap is not None:
            self.block_swap.release()
        if self.quantized_base is not None:
            self.quantized_base.release()
        if self.fused_backward is not None:
            self.fused_backward.remove()
        if self.stochastic_rounding is not None:
            self.stochastic_rounding.remove()
        self.trained.release()
        release_graph_memory()


def _activation_scale(data):
    """How many times the largest sample's latent outnumbers the smallest's: the most a later micro-batch's
    activations can outgrow the first step's, which the VRAM budget's plan measures."""
    sizes = [sample.latent.numel() for sample in data.samples]
    return max(sizes) / min(sizes) if sizes else 1.0
