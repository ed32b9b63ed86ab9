"""Building a run, nothing trained yet: the inputs checked, the training clone of the MODEL with its
adapters (fresh, or from the resume file) and the injections that speed or slim its steps, the text
encoder's adapters, the optimizer with its schedule and loss scaler, the EMA, the data order, and
the progress a resume restores.

The inputs are never changed: training happens on clones with adapters injected in bypass form.
In a run of several processes (distributed.py) every process builds the same run; rank 0's adapter
weights are handed to the others, as DDP starts."""

import dataclasses
import random
import time
from typing import Any

import torch

from ...comfy_compat import trainable_model_clone
from ...errors import EriDiffusionError
from ...formats.lora_file import loadable_weight_keys
from ..adapters import attach_adapters, narrow_layers, warn_narrow_layers
from ..adapters.from_tensors import adapters_from_tensors
from ..adapters.layer_selection import block_multipliers
from ..data.batches import BatchSampler
from ..data.training_data import TrainingData
from ..model import loading as model_loading
from ..model.autograd_weights import frozen_weights_injection
from ..model.families import family_of, resolve_objective, resolve_targets
from ..model.objective import Objective
from ..model.text_encoder import TextEncoderTraining
from ..speed.checkpointing import checkpointing_injection
from ..speed.compile_blocks import compile_blocks_injection
from ..speed.cuda_graphs import release_graph_memory
from ..speed.fp8_products import Fp8Products
from . import run_state
from .config import TrainConfig
from .distributed import SINGLE_PROCESS, TrainingProcesses
from .ema import AdapterEMA
from .lr_schedule import lr_factor
from .optimizers import make_optimizer, parameter_groups
from .resume import ResumePoint


class TrainingRun:
    """One run's moving parts, built here and trained by trainer.train. `source` is the input MODEL
    as training sees it (the same weights; reloaded as a plain patcher where ComfyUI's dynamic VRAM
    manages the input), `patcher` the clone trained on."""

    def __init__(
        self,
        model_patcher: Any,
        data: TrainingData,
        config: TrainConfig,
        run_dir: str,
        clip: Any = None,
        resume: ResumePoint | None = None,
        processes: TrainingProcesses = SINGLE_PROCESS,
    ) -> None:
        self.started = time.perf_counter()
        self.data, self.config, self.run_dir, self.processes = data, config, run_dir, processes
        self.source = trainable_model_clone(model_patcher)
        # dynamic VRAM's reload for training: a model of the run's own, whose weights it may cast
        self.owns_model = self.source.model is not model_patcher.model
        self.patcher = self.source.clone()
        if config.device != "auto":  # another GPU than ComfyUI's; the result MODEL goes back to the input's
            self.patcher.load_device = torch.device(config.device)
        self.base, self.device = self.patcher.model, self.patcher.load_device
        self.prefixes = loadable_weight_keys(self.base)
        # fp8_compute: the fp8 weights of the adapted layers, made in the first step and kept for the run
        self.fp8_products = Fp8Products(config.speed.fp8_min_macs) if config.fp8_compute else None
        self.preservation = None  # differential output preservation: the class phrase's conditioning
        if config.preservation_prompt.strip():
            with model_loading.as_comfyui_loads():  # the graph's own CLIP, loaded as ComfyUI loads it
                self.preservation = clip.encode_from_tokens_scheduled(clip.tokenize(config.preservation_prompt))
        self.family = family_of(self.base)
        self.objective = Objective(self.base.model_sampling, resolve_objective(config.objective, self.family))
        self.adapters, self.text_encoder = self._adapters(clip, resume)
        # every trained tensor, listed once: walking the ~2,000 adapter modules each step took 0.044 s
        # of an eager SDXL step (cProfile, H100)
        self.trained_parameters = list(self.adapters.parameters())
        if self.text_encoder is not None:
            self.trained_parameters += list(self.text_encoder.adapters.parameters())
        processes.broadcast_parameters(self.trained_parameters)  # as DDP starts: rank 0's weights everywhere
        self.optimizer, self.scheduler, self.scaler, self.ema = self._optimization()
        self._data_order()
        self.progress = run_state.RunProgress()
        self.evaluation_range = (0.0, 1.0)  # the noise levels the evaluation loss spreads over (an expert: its own)
        if resume is not None and resume.state is not None:
            run_state.restore(self, resume.state, resume.path)

    def _adapters(self, clip, resume):
        """(the diffusion model's AdapterSet, the TextEncoderTraining or None), fresh or from the
        resume file, on a clone with autograd-safe weights and the step's injections."""
        config = self.config
        if self.base.get_dtype() != config.torch_dtype:
            held = self.owns_model and model_loading.hold_weights_in(self.base, config.torch_dtype)
            if not held:  # ComfyUI casts each weight in each forward
                self.patcher.set_model_compute_dtype(config.torch_dtype)
        frozen_weights_injection(self.patcher)
        spec = resume.spec if resume is not None else config.adapter
        spec = dataclasses.replace(spec, targets=resolve_targets(spec.targets, self.family))
        if resume is None:
            adapters, used = attach_adapters(self.patcher, spec, self.prefixes.keys(), seed=config.seed), set()
        else:
            adapters, used = adapters_from_tensors(self.patcher.model, resume.tensors, spec, self.prefixes, resume.path)
            adapters.to(self.device).attach_to(self.patcher)
        if config.torch_compile:
            compile_blocks_injection(self.patcher)
        if config.gradient_checkpointing:
            checkpointing_injection(self.patcher, copy_saved=self.family.copies_saved_activations)
        text_encoder = None
        if config.text_encoder_lr > 0:
            tensors, path = (resume.tensors, resume.path) if resume is not None else (None, None)
            text_encoder = TextEncoderTraining(
                clip, spec, config.seed, tensors, path, encodings_on_device=config.speed.encodings_on_device
            )
        narrow = narrow_layers(adapters, self.base)
        if text_encoder is not None:
            narrow += narrow_layers(text_encoder.adapters, text_encoder.clip.patcher.model)
        warn_narrow_layers(spec, narrow)
        if resume is not None:
            unused = sorted(set(resume.tensors) - used - (text_encoder.used_keys if text_encoder else set()))
            if unused:
                raise EriDiffusionError(
                    f"{resume.path} has weights this run would drop (e.g. {unused[0]}): "
                    "text-encoder weights need a CLIP and text_encoder_lr > 0; others belong "
                    "to another model."
                )
        return adapters, text_encoder

    def _optimization(self):
        """(optimizer, LR scheduler, loss scaler, EMA or None) of the trained parameters."""
        config = self.config
        multipliers = block_multipliers(self.adapters.layer_names, config.block_lr) if config.block_lr.strip() else None
        groups = parameter_groups(
            self.adapters, config.learning_rate, self.text_encoder, config.text_encoder_lr, multipliers
        )
        optimizer = make_optimizer(config.optimizer, groups, config.learning_rate, config.weight_decay, self.device)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(config))
        # fp16 gradients underflow without loss scaling; bf16 and fp32 need none (the scaler is then a no-op).
        scaler = torch.amp.GradScaler(self.device.type, enabled=config.dtype == "fp16" and self.device.type == "cuda")
        ema = AdapterEMA(self.trained_parameters, config.ema_decay, config.ema_warmup) if config.ema_decay > 0 else None
        return optimizer, scheduler, scaler, ema

    def _data_order(self):
        """The batch samplers and the generators of captions, noise and noise levels."""
        config, data = self.config, self.data
        # the global micro-batch: every process draws it alike and trains its part (micro_batches.py)
        global_batch = config.batch_size * self.processes.world_size
        self.batches = BatchSampler(data, global_batch, config.seed)
        self.prior_batches = None  # regularization (class) images, one micro-batch beside each training one
        if data.regularization is not None:
            self.prior_batches = BatchSampler(data.regularization, global_batch, config.seed + 3)
        self.choice = random.Random(config.seed + 1)  # captions and dropout, host side
        self.noise_gen = torch.Generator(device=self.device).manual_seed(config.seed + 2)

    def release(self):
        """Hand the training clones back to ComfyUI so their injections come off the shared modules."""
        if self.fp8_products is not None:
            self.fp8_products.clear()
        model_loading.unload(self.patcher)
        if self.text_encoder is not None:
            self.text_encoder.unload()
        release_graph_memory()
