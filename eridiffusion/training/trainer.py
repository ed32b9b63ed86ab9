"""The training loop: setup, loop, evaluation, checkpoints — in that order, top to bottom.

Works on a ComfyUI ModelPatcher (and optionally its CLIP) and the TrainingData of CacheLatents.
The inputs are never changed: training happens on clones with adapters injected in bypass
form, and the results are other clones of the inputs with the trained adapters attached.
In a run of several processes (distributed.py) each trains its part of every global micro-batch,
the gradients are averaged once per optimizer step, and rank 0 alone writes files.
"""

import contextlib
import dataclasses
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..comfy_compat import trainable_model_clone, training_forward
from . import model_loading, run_state
from .adapters import attach_adapters, narrow_layers, warn_narrow_layers
from .adapters.compute_copies import ComputeCopies
from .adapters.fp8_products import Fp8Products, check_fp8_compute
from .atomic_file import write_json_atomic
from .autograd_weights import frozen_weights_injection
from .batches import BatchSampler
from .checkpointing import checkpointing_injection
from .compile_blocks import compile_blocks_injection
from .cuda_graphs import GraphedCall
from .distributed import SINGLE_PROCESS
from .ema import AdapterEMA
from .errors import EriDiffusionError
from .evaluation import evaluation_loss
from .families import family_of, resolve_objective, resolve_targets
from .layer_selection import block_multipliers
from .lora_format import check_finite, export_lora, loadable_weight_keys, raw_path, run_metadata
from .lr_schedule import lr_factor
from .model_forward import prediction, token_count, transformer_options_of
from .model_inputs import batch_inputs
from .non_finite import MAX_SKIPS_IN_A_ROW, StepHealth, diverged_error, gradient_norm, skip_on_device
from .objective import Objective
from .optimizers import check_optimizer_runs, make_optimizer
from .prepared_data import PreparedData, conditioning_options
from .resume import adapters_from_tensors, save_state, state_path
from .sample_render import render_samples
from .summary import run_summary
from .text_encoder import TextEncoderTraining, parameter_groups
from .validation import ValidationLoss

INPUT = "input."  # the model inputs' names in a micro-batch's dict of tensors
PRESERVED = "preserved."  # the preservation prompt's model inputs there


@dataclass
class TrainingHooks:
    """How a caller watches and steers a run; every hook is optional."""

    on_progress: Callable | None = None  # (step, total, new_losses or None, stats dict)
    check_cancel: Callable | None = None  # raises to stop the run (ComfyUI's cancel)
    should_stop: Callable | None = None  # True: end at this step boundary, save, return the result
    on_samples: Callable | None = None  # (step, grid IMAGE, paths)


@dataclass
class TrainResult:
    lora: object  # TrainedLoRA, ready for SaveLoRA
    losses: list  # training loss per optimizer step
    eval_loss_before: float
    eval_loss_after: float
    seconds_per_step: float
    run_dir: str
    patcher: object = None  # a clone of the input MODEL with the trained adapters
    checkpoints: list = field(default_factory=list)
    samples: torch.Tensor | None = None
    adapters: object = None  # the trained AdapterSet (attached to `patcher`)
    sample_paths: list = field(default_factory=list)
    peak_memory_gib: float = 0.0
    clip: object = None  # a clone of the input CLIP with its trained adapters, if trained
    skipped_steps: int = 0  # on_nan=skip: steps whose update was left out (non-finite)
    peak_memory_gib_per_process: list = field(default_factory=list)  # [rank 0's, rank 1's, ...]
    validation: list = field(default_factory=list)  # [[step, validation loss], ...]
    best: dict | None = None  # {"step", "loss", "path"} of the lowest validation loss
    stopped_early: bool = False  # early_stop_patience ended the run


class TrainingRun:
    """One run's moving parts, built in __init__ (nothing trained yet) and driven by train()."""

    def __init__(self, model_patcher, data, config, run_dir, clip=None, resume=None, processes=SINGLE_PROCESS):
        if not data.samples:
            raise EriDiffusionError("TRAINING_DATA holds no samples; check the LoadDataset folder.")
        if config.text_encoder_lr > 0 and clip is None:
            raise EriDiffusionError(
                "text_encoder_lr > 0 trains the text encoder: connect the graph's CLIP to "
                "LoRATrainer's clip input (or set text_encoder_lr to 0)."
            )
        if processes.distributed and config.device != "auto":
            raise EriDiffusionError(
                f"device {config.device}: a run of {processes.world_size} processes trains each on its own GPU "
                "(torchrun's LOCAL_RANK); set device to auto."
            )
        self.model_patcher, self.data, self.config, self.run_dir = model_patcher, data, config, run_dir
        self.processes = processes
        self._trained = None  # _trained_parameters, once the adapters exist
        # `source`: the input MODEL as training sees it (the same weights; reloaded as a plain
        # patcher where ComfyUI's dynamic VRAM manages the input); `patcher`: the clone trained on.
        self.source = trainable_model_clone(model_patcher)
        self.patcher = self.source.clone()
        if config.device != "auto":  # another GPU than ComfyUI's; the result MODEL goes back to the input's
            self.patcher.load_device = torch.device(config.device)
        self.base = self.patcher.model
        self.prefixes = loadable_weight_keys(self.base)
        self.device = self.patcher.load_device
        check_optimizer_runs(config.optimizer, self.device)  # before any heavy work
        if config.fp8_compute:
            check_fp8_compute(self.device)
        # fp8_compute: the fp8 weights of the adapted layers, made in the first step and kept for the run
        self.fp8_products = Fp8Products() if config.fp8_compute else None
        if data.regularization is not None and config.prior_weight == 0:
            raise EriDiffusionError(
                "regularization images are connected to CacheLatents but prior_weight is 0, so they would be "
                "drawn and ignored: raise prior_weight (DreamBooth uses 1.0) or disconnect them."
            )
        self.preservation = None  # differential output preservation: the class phrase's conditioning
        if config.preservation_prompt.strip():
            if clip is None:
                raise EriDiffusionError(
                    "preservation_prompt needs the text encoder to encode the class phrase: connect the graph's "
                    "CLIP to LoRATrainer's clip input (or clear preservation_prompt)."
                )
            with model_loading.as_comfyui_loads():  # the graph's own CLIP, loaded as ComfyUI loads it
                self.preservation = clip.encode_from_tokens_scheduled(clip.tokenize(config.preservation_prompt))

        # a clone with autograd-safe weights, adapters (fresh or from the resume file), checkpointing
        if self.base.get_dtype() != config.torch_dtype:
            self.patcher.set_model_compute_dtype(config.torch_dtype)
        frozen_weights_injection(self.patcher)
        self.family = family_of(self.base)
        spec = resume.spec if resume is not None else config.adapter
        spec = dataclasses.replace(spec, targets=resolve_targets(spec.targets, self.family))
        self.objective = Objective(self.base.model_sampling, resolve_objective(config.objective, self.family))
        if resume is None:
            self.adapters = attach_adapters(self.patcher, spec, self.prefixes.keys(), seed=config.seed)
        else:
            self.adapters, used = adapters_from_tensors(
                self.patcher.model, resume.tensors, spec, self.prefixes, resume.path
            )
            self.adapters.to(self.device).attach_to(self.patcher)
        if config.torch_compile:
            compile_blocks_injection(self.patcher)
        if config.gradient_checkpointing:
            checkpointing_injection(self.patcher, copy_saved=self.family.copies_saved_activations)
        self.text_encoder = None
        if config.text_encoder_lr > 0:
            self.text_encoder = TextEncoderTraining(
                clip,
                spec,
                config.seed,
                resume.tensors if resume is not None else None,
                resume.path if resume is not None else None,
            )
        warn_narrow_layers(
            spec,
            narrow_layers(self.adapters, self.base)
            + (
                narrow_layers(self.text_encoder.adapters, self.text_encoder.clip.patcher.model)
                if self.text_encoder
                else []
            ),
        )
        if resume is not None:
            te_used = self.text_encoder.used_keys if self.text_encoder else set()
            unused = sorted(set(resume.tensors) - used - te_used)
            if unused:
                raise EriDiffusionError(
                    f"{resume.path} has weights this run would drop (e.g. {unused[0]}): "
                    "text-encoder weights need a CLIP and text_encoder_lr > 0; others belong "
                    "to another model."
                )

        processes.broadcast_parameters(self._trained_parameters())  # as DDP starts: rank 0's weights everywhere
        multipliers = block_multipliers(self.adapters.layer_names, config.block_lr) if config.block_lr.strip() else None
        groups = parameter_groups(
            self.adapters, config.learning_rate, self.text_encoder, config.text_encoder_lr, multipliers
        )
        self.optimizer = make_optimizer(
            config.optimizer, groups, config.learning_rate, config.weight_decay, self.device
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_factor(config))
        self.ema = None
        if config.ema_decay > 0:
            self.ema = AdapterEMA(self._trained_parameters(), config.ema_decay, config.ema_warmup)
        # fp16 gradients underflow without loss scaling; bf16 and fp32 need none (the scaler is then a no-op).
        self.scaler = torch.amp.GradScaler(
            self.device.type, enabled=config.dtype == "fp16" and self.device.type == "cuda"
        )
        # the global micro-batch: every process draws it alike and trains its part (see _micro_batch)
        self.batches = BatchSampler(data, config.batch_size * processes.world_size, config.seed)
        self.prior_batches = None  # regularization (class) images, one micro-batch beside each training one
        if data.regularization is not None:
            self.prior_batches = BatchSampler(
                data.regularization, config.batch_size * processes.world_size, config.seed + 3
            )
        self.choice = random.Random(config.seed + 1)  # captions and dropout, host side
        self.noise_gen = torch.Generator(device=self.device).manual_seed(config.seed + 2)
        self.start_step, self.losses, self.eval_before = 0, [], None
        self.checkpoints = []
        self.validation_points, self.best, self.checks_since_best = [], None, 0
        if resume is not None and resume.state is not None:
            run_state.restore(self, resume.state, resume.path)

    def _export(self, step):
        """The adapter as a LoRA file's content: with EMA, the averaged weights, the trained ones as `raw`."""
        text_encoder = (self.text_encoder.adapters, self.text_encoder.prefixes) if self.text_encoder else None

        def export():
            return export_lora(
                self.adapters,
                self.prefixes,
                run_metadata(self.base, self.config, self.data, step),
                text_encoder=text_encoder,
            )

        if self.ema is None:
            return export()
        raw = export()
        with self.ema.applied():
            averaged = export()
        averaged.metadata["eridiffusion_weights"] = f"ema (decay {self.config.ema_decay:g}; trained weights: *_raw)"
        averaged.raw = raw
        return averaged

    def _averaged(self):
        """The block runs on the EMA weights when the run keeps them (sampling, validation)."""
        return self.ema.applied() if self.ema is not None else contextlib.nullcontext()

    def _checkpoint_path(self, name):
        return os.path.join(self.run_dir, "checkpoints", name)

    def save_checkpoint(self, step):
        """Rank 0 writes the checkpoint (and drops those keep_last lets go) while the others wait."""
        path = self._checkpoint_path(f"{self.config.run_name}_step{step:06d}.safetensors")
        if self.processes.is_main:
            lora = self._export(step)
            check_finite(lora.tensors, lora.tensors, "fp32", path)  # before its state is written
            if lora.raw is not None:
                check_finite(lora.raw.tensors, lora.raw.tensors, "fp32", raw_path(path))
            save_state(path, run_state.capture(self, step))
            lora.save(path, dtype="fp32", overwrite=True)
        self.checkpoints.append(path)
        keep = self.config.keep_last
        if keep and len(self.checkpoints) > keep:
            dropped, self.checkpoints = self.checkpoints[:-keep], self.checkpoints[-keep:]
            if self.processes.is_main:
                for file in [f for old in dropped for f in (old, state_path(old), raw_path(old))]:
                    if os.path.exists(file):
                        os.remove(file)
        self.processes.barrier()

    def _validate(self, step, validation, transformer_options):
        """Measure the validation loss after `step` steps (its one read-back), keep the adapter as
        best.safetensors when it is the lowest so far, and count the checks since the best."""
        with self._averaged():
            value = float(validation(self.patcher, transformer_options))
        self.validation_points.append([step, value])
        if self.best is None or value < self.best["loss"]:
            path = self._checkpoint_path("best.safetensors")
            if self.processes.is_main:  # (every process measured the same value)
                lora = self._export(step)
                lora.metadata["validation_loss"] = repr(value)
                lora.save(path, dtype="fp32", overwrite=True)
            self.best, self.checks_since_best = {"step": step, "loss": value, "path": path}, 0
        else:
            self.checks_since_best += 1
        return [step, value]

    def _write_loss_log(self):
        if not self.processes.is_main:
            return
        log = {"loss": self.losses}
        if self.validation_points:
            log["validation"] = self.validation_points
        write_json_atomic(os.path.join(self.run_dir, "loss.json"), log)

    # --- one optimizer step
    def _micro_batches(self, prepared, prior, step):
        """The losses of one micro-batch of training images (with the preservation prompt's inputs on
        every preservation_every-th step) and, with regularization images, of one of those (times
        prior_weight), in turn: each is backpropagated before the next is drawn (CUDA graphs share one
        memory pool)."""
        preserve = self.preservation is not None and step % self.config.preservation_every == 0
        yield self._micro_batch(prepared, self.batches, self.data, preserve=preserve)
        if prior is not None:
            yield self.config.prior_weight * self._micro_batch(prior, self.prior_batches, self.data.regularization)

    def _micro_batch(self, prepared, batches, data, preserve=False):
        """One micro-batch's loss: a batch drawn, noised, and its loss (replayed from a CUDA graph
        when there is one); `preserve` adds the preservation prompt's inputs (see _loss_function).

        Captions, noise and noise levels are drawn for the whole global micro-batch from generators
        every process holds alike, and each process keeps its part: so N processes x batch_size b
        train exactly what 1 process x batch_size N*b trains (and a state continues on either), each
        process on other samples with other noise. Seeding each process apart would tie the result
        to the number of processes."""
        objective = self.objective
        drawn = batches.next()
        variants = []
        for i in drawn:
            dropped = data.caption_dropout > 0 and self.choice.random() < data.caption_dropout
            variants.append(None if dropped else self.choice.randrange(prepared.variants(i)))
        part = self.processes.part(drawn)
        indices = drawn[part]
        x0 = torch.stack([prepared.latents[i] for i in indices])
        if self.text_encoder is not None:
            self.text_encoder.micro_batch_starts()
        chosen = [prepared.inputs_for(i, v, self.text_encoder) for i, v in zip(indices, variants[part])]
        noise = objective.noise((len(drawn), *x0.shape[1:]), self.noise_gen, self.device)[part].to(x0.dtype)
        sigma = objective.sample_sigmas(
            len(drawn),
            self.noise_gen,
            self.device,
            tokens=token_count(x0, self.base.diffusion_model, self.family.latent_patch),
        )[part]
        batch = {"x_t": objective.noisy_latent(x0, noise, sigma), "sigma": sigma, "x0": x0}
        mask = prepared.mask_weights(indices)
        if mask is not None:
            batch["mask"] = mask
        if self.text_encoder is not None:
            model_loading.load(self.patcher, self.config.weights_vram_gib)  # encoding loaded the CLIP
        batch.update({INPUT + name: value for name, value in batch_inputs(chosen).items()})
        if preserve:
            preserved = batch_inputs([prepared.preservation_inputs[i] for i in indices])
            batch.update({PRESERVED + name: value for name, value in preserved.items()})
        loss = self.graphed(batch) if self.graphed is not None else None
        return loss if loss is not None else self.loss_of(batch)

    def _loss_function(self, transformer_options):
        """loss(batch) of a micro-batch as _micro_batch builds it: the objective's loss of the
        model's prediction (weighted by the batch's mask, if any). With the preservation prompt's
        inputs, plus preservation_weight times the same loss between the adapted prediction for that
        prompt and the prediction with the adapters bypassed (under no_grad: the target), times
        preservation_every (the steps it stands for)."""
        objective, config = self.objective, self.config
        preservation_weight = config.preservation_weight * config.preservation_every

        def predict(batch, prefix):
            inputs = {name[len(prefix) :]: value for name, value in batch.items() if name.startswith(prefix)}
            return prediction(
                self.base,
                transformer_options,
                batch["x_t"],
                batch["sigma"],
                inputs,
                copy_saved=self.family.copies_saved_activations,
            )

        def loss(batch):
            total = objective.loss(predict(batch, INPUT), batch["x0"], batch["sigma"], batch.get("mask")).mean()
            if any(name.startswith(PRESERVED) for name in batch):
                with torch.no_grad(), self.adapters.bypassed():
                    base = predict(batch, PRESERVED)
                drift = objective.loss(predict(batch, PRESERVED), base, batch["sigma"]).mean()
                total = total + preservation_weight * drift
            return total

        return loss

    def _graphs_wanted(self):
        """Whether the steps replay from CUDA graphs (config.cuda_graphs); raises where `on` cannot."""
        setting = self.config.cuda_graphs
        streamed = self.config.weights_vram_gib > 0
        if setting == "off" or (setting == "auto" and (self.device.type != "cuda" or streamed)):
            return False
        if streamed:
            raise EriDiffusionError(
                "cuda_graphs cannot replay weights streamed from CPU memory (weights_vram_gib > 0): "
                "set cuda_graphs to auto or off, or weights_vram_gib to 0."
            )
        if self.device.type != "cuda":
            raise EriDiffusionError(
                f"cuda_graphs needs a CUDA device; this model trains on {self.device}. Turn cuda_graphs off."
            )
        return True

    def _graphed_loss(self, transformer_options, copies):
        """The micro-batch loss as CUDA graphs (config.cuda_graphs), else None. With the text encoder
        trained, its encoding is a graph input that requires grad, the model's weight addresses
        are checked before each replay (loading the text encoder could move them), and the encoders'
        transformers replay from graphs of their own (graphed_text_encoder.py). With ComputeCopies
        (`copies`), the graphs take the copies the layers compute with as trained inputs too."""
        if not self._graphs_wanted():
            return None
        setting = self.config.cuda_graphs
        frozen = None
        if self.text_encoder is not None:
            frozen = self.base.diffusion_model
            self.text_encoder.replay_from_graphs(strict=setting == "on")
        trained = self.adapters
        if copies is not None:  # the layers compute with the copies: their gradients come out of the graph
            trained = torch.nn.ModuleList([self.adapters, copies.graphed_parameters()])
        return GraphedCall(self._loss_function(transformer_options), trained, setting == "on", frozen=frozen)

    def _compute_copies(self, graphed):
        """ComputeCopies of the adapters when the step computes in a lower precision than the adapters'
        fp32, else None; a step replayed from CUDA graphs (`graphed`) has no shared-input groups."""
        dtype = self.config.torch_dtype
        if dtype == torch.float32 or not ComputeCopies.worth_it(self.adapters, dtype):
            return None
        return ComputeCopies(self.adapters, dtype, share_inputs=not graphed)

    def _prepared(self, data, preservation=None):
        """PreparedData of `data` (the training or the regularization images) for this run."""
        return PreparedData(
            self.base,
            data,
            self.device,
            cached_inputs=self.text_encoder is None,
            options=conditioning_options(self.config, self.family),
            mask_floor=self.config.mask_min,
            preservation=preservation,
        )

    def _trained_parameters(self):
        """Every trained tensor (the adapters', the text encoder's adapters'), listed once: a step asks
        twice, and walking the ~2,000 adapter modules each time took 0.044 s of an eager SDXL step
        (cProfile, H100)."""
        if self._trained is None:
            params = list(self.adapters.parameters())
            self._trained = params + (list(self.text_encoder.adapters.parameters()) if self.text_encoder else [])
        return self._trained

    def _optimizer_step(self, finite, on_device):
        """The scaled optimizer step. With `finite` (on_nan=skip), a step where it is False leaves the
        adapters and the optimizer's state as they were: decided on the device where the optimizer
        can (`on_device`), else by reading the flag back."""
        if finite is None:
            self.scaler.step(self.optimizer)
        elif on_device:
            self.optimizer.found_inf = (~finite).float()
            try:
                self.optimizer.step()
            finally:
                del self.optimizer.found_inf
        elif bool(finite):
            self.scaler.step(self.optimizer)
        self.scaler.update()

    def _check_finite(self, health, start, losses, norms):
        """Stop at the first non-finite step read back (on_nan=stop), or count the skipped ones and
        stop when too many come in a row (on_nan=skip)."""
        checkpoint = self.checkpoints[-1] if self.checkpoints else None
        if self.config.on_nan == "stop":
            bad = health.bad_steps(start, losses, norms)
            if bad:
                raise diverged_error(*bad[0], self.config, self.start_step + 1, checkpoint)
            return
        bad = health.count(start, losses, norms)
        if health.bad_in_a_row >= MAX_SKIPS_IN_A_ROW:
            raise diverged_error(
                *bad[-1], self.config, self.start_step + 1, checkpoint, skipped_in_a_row=health.bad_in_a_row
            )

    def train(self, sample_settings, hooks):
        config, device = self.config, self.device
        if self.eval_before is None:
            self.eval_before = evaluation_loss(self.patcher, self.data, config, text_encoder=self.text_encoder)
        model_loading.load(self.patcher, config.weights_vram_gib)
        objective = self.objective
        prepared = self._prepared(self.data, self.preservation)
        prior = self._prepared(self.data.regularization) if self.data.regularization is not None else None
        transformer_options = transformer_options_of(self.patcher)
        self.loss_of = self._loss_function(transformer_options)
        copies = self._compute_copies(graphed=self._graphs_wanted())
        self.graphed = self._graphed_loss(transformer_options, copies)
        validation = None
        if self.data.validation is not None:
            validation = ValidationLoss(
                self.base,
                self.data.validation,
                device,
                objective,
                config,
                conditioning_options(config, self.family),
                self.text_encoder,
            )
        stopped_early = False
        health = StepHealth(config.steps, device, config.on_nan, self.scaler.is_enabled())
        skip_on_the_device = skip_on_device(self.optimizer, self.scaler)
        samples, sample_paths = None, []
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

        started, timed_from, logged = time.perf_counter(), None, self.start_step
        done = self.start_step
        for step in range(self.start_step, config.steps):
            if hooks.check_cancel is not None:
                hooks.check_cancel()
            step_loss = torch.zeros((), device=device)
            in_compute_dtype = copies.in_use() if copies is not None else contextlib.nullcontext()
            with training_forward(), self.adapters.frozen_products(self.fp8_products), in_compute_dtype:
                for _ in range(config.grad_accum):
                    for loss in self._micro_batches(prepared, prior, step):
                        loss = loss / config.grad_accum
                        self.scaler.scale(loss).backward()
                        if copies is not None:
                            copies.fold_gradients()
                        step_loss += loss.detach()
            # several processes: the gradients summed over the micro-batches, then averaged (DDP with no_sync)
            step_loss = self.processes.average_gradients(self._trained_parameters(), step_loss)
            self.scaler.unscale_(self.optimizer)
            norm = gradient_norm(self._trained_parameters(), config.max_grad_norm)
            finite = health.finite(step_loss, norm) if config.on_nan == "skip" else None
            self._optimizer_step(finite, skip_on_the_device)
            if self.ema is not None:
                self.ema.update()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            health.record(step, step_loss, norm)
            if self.fp8_products is not None and step == self.start_step:
                in_fp8, seen = self.fp8_products.layers_in_fp8()
                logging.info(
                    f"EriDiffusion: fp8_compute: {in_fp8} of the {seen} adapted layers compute their frozen product in "
                    "fp8 (the others are convolutions, streamed, patched, or too small for fp8 to gain)."
                )

            done = step + 1
            asked = hooks.should_stop is not None and done < config.steps and hooks.should_stop()
            stopping = self.processes.any(asked)  # all processes stop at one step (a Ctrl-C reaches each)
            last = done == config.steps or stopping
            checkpoint_due = config.save_every and done % config.save_every == 0 and not last
            sampling_due = sample_settings is not None and (done % sample_settings.every == 0 or last)
            validation_due = validation is not None and (done % config.validate_every == 0 or last)
            new, point = None, None
            # checkpoints, samples and validation come after a check: none is made from a diverged adapter
            if done % config.log_every == 0 or last or checkpoint_due or sampling_due or validation_due:
                new, norms = health.read(logged, done)  # the one device sync of a logging step
                self.losses += new
                self._write_loss_log()
                self._check_finite(health, logged, new, norms)
                logged = done
                if timed_from is None:
                    timed_from = (done, time.perf_counter())
            if validation_due:
                point = self._validate(done, validation, transformer_options)
                patience = config.early_stop_patience
                if patience and self.checks_since_best >= patience and not last:
                    stopping = last = stopped_early = True  # ends here, as Stop & save does
                    checkpoint_due, sampling_due = False, sample_settings is not None
                self._write_loss_log()
            if hooks.on_progress is not None:
                stats = {"lr": self.scheduler.get_last_lr()[0]}
                if point is not None:
                    stats["validation"] = [point]
                if device.type == "cuda":  # allocator bookkeeping: no device sync
                    stats["peak_vram_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
                hooks.on_progress(done, config.steps, new, stats)
            if checkpoint_due:
                self.save_checkpoint(done)
            if sampling_due and self.processes.is_main:
                with self._averaged():
                    samples, paths = render_samples(
                        self.patcher, sample_settings, done, os.path.join(self.run_dir, "samples")
                    )
                sample_paths += paths
                if hooks.on_samples is not None:
                    hooks.on_samples(done, samples, paths)
            if sampling_due:
                self.processes.barrier()
            if stopping:
                break

        finished = time.perf_counter()
        if timed_from is not None and done > timed_from[0]:
            seconds_per_step = (finished - timed_from[1]) / (done - timed_from[0])
        else:
            seconds_per_step = (finished - started) / max(1, done - self.start_step)
        peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
        self.save_checkpoint(done)

        lora = self._export(done)
        if self.ema is not None:
            self.ema.copy_to_parameters()  # the run's result (MODEL, evaluation) is the averaged adapter
        self.adapters.requires_grad_(False)
        eval_after = evaluation_loss(self.patcher, self.data, config, text_encoder=self.text_encoder)
        return TrainResult(
            lora=lora,
            losses=self.losses,
            eval_loss_before=self.eval_before,
            eval_loss_after=eval_after,
            seconds_per_step=seconds_per_step,
            run_dir=self.run_dir,
            checkpoints=list(self.checkpoints),
            samples=samples,
            adapters=self.adapters,
            sample_paths=sample_paths,
            peak_memory_gib=peak,
            skipped_steps=health.skipped,
            peak_memory_gib_per_process=self.processes.gather(peak),
            validation=list(self.validation_points),
            best=dict(self.best) if self.best else None,
            stopped_early=stopped_early,
        )

    def release(self):
        """Hand the training clones back to ComfyUI so their injections come off the shared modules,
        and let go of what only training used (CUDA graphs, fp8 weights)."""
        self.graphed = None
        if self.fp8_products is not None:
            self.fp8_products.clear()
        model_loading.unload(self.patcher)
        if self.text_encoder is not None:
            self.text_encoder.unload()


def train_lora(
    model_patcher,
    data,
    config,
    run_dir,
    sample_settings=None,
    hooks=None,
    clip=None,
    resume=None,
    processes=SINGLE_PROCESS,
):
    """Train, save checkpoints to run_dir, and return the trained MODEL (and CLIP) clones and LoRA.
    `processes`: this process's place in a run of several (distributed.join_processes)."""
    run = TrainingRun(model_patcher, data, config, run_dir, clip=clip, resume=resume, processes=processes)
    try:
        result = run.train(sample_settings, hooks or TrainingHooks())
    finally:
        run.release()
    result.patcher = run.source.clone()
    run.adapters.attach_to(result.patcher)
    if run.text_encoder is not None:
        result.clip = run.text_encoder.result_clip()
    if processes.is_main:
        write_json_atomic(os.path.join(run_dir, "summary.json"), run_summary(result, config))
    return result
