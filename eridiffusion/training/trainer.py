"""The training loop: setup, loop, evaluation, checkpoints — in that order, top to bottom.

Works on a ComfyUI ModelPatcher (and optionally its CLIP) and the TrainingData of CacheLatents.
The inputs are never changed: training happens on clones with adapters injected in bypass
form, and the results are other clones of the inputs with the trained adapters attached.
"""
import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import random
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import comfy.patcher_extension
import torch

from .. import __version__
from ..comfy_compat import trainable_model_clone, training_forward
from . import model_loading
from .adapters import attach_adapters, narrow_layers
from .atomic_file import sweep_stale_temp_files, write_json_atomic
from .autograd_inplace import OutOfPlaceAugmentedAssignments
from .autograd_saved import saved_activations_copied
from .autograd_weights import frozen_weights_injection
from .checkpointing import checkpointing_injection
from .compile_blocks import compile_blocks_injection
from .cuda_graphs import GraphedLoss
from .errors import EriDiffusionError
from .families import family_of, resolve_objective, resolve_targets
from .lora_format import check_finite, export_lora, loadable_weight_keys
from .non_finite import MAX_SKIPS_IN_A_ROW, StepHealth, diverged_error, gradient_norm, skip_on_device
from .model_inputs import batch_inputs, model_inputs
from .objective import Objective
from .optimizers import check_optimizer_runs, make_optimizer
from .resume import adapters_from_tensors, save_state, state_path
from .sample_render import render_samples
from .text_encoder import TextEncoderTraining, parameter_groups


@dataclass
class TrainingHooks:
    """How a caller watches and steers a run; every hook is optional."""
    on_progress: Optional[Callable] = None    # (step, total, new_losses or None, stats dict)
    check_cancel: Optional[Callable] = None   # raises to stop the run (ComfyUI's cancel)
    should_stop: Optional[Callable] = None    # True: end at this step boundary, save, return the result
    on_samples: Optional[Callable] = None     # (step, grid IMAGE, paths)


@dataclass
class TrainResult:
    patcher: object                  # a clone of the input MODEL with the trained adapters
    lora: object                     # TrainedLoRA, ready for SaveLoRA
    losses: list                     # training loss per optimizer step
    eval_loss_before: float
    eval_loss_after: float
    seconds_per_step: float
    run_dir: str
    checkpoints: list = field(default_factory=list)
    samples: Optional[torch.Tensor] = None
    adapters: object = None          # the trained AdapterSet (attached to `patcher`)
    sample_paths: list = field(default_factory=list)
    peak_memory_gib: float = 0.0
    clip: object = None              # a clone of the input CLIP with its trained adapters, if trained
    skipped_steps: int = 0           # on_nan=skip: steps whose update was left out (non-finite)


def unique_run_dir(parent, name):
    """parent/name, or parent/name_2, _3 … when an earlier run already wrote there. Temp files
    that killed runs of this name left in their folders are removed first."""
    earlier = re.compile(re.escape(name) + r"(_\d+)?")
    if os.path.isdir(parent):
        for entry in os.scandir(parent):
            if entry.is_dir() and earlier.fullmatch(entry.name):
                for folder in (entry.path, os.path.join(entry.path, "checkpoints"), os.path.join(entry.path, "samples")):
                    sweep_stale_temp_files(folder)
    candidate, n = os.path.join(parent, name), 1
    while os.path.exists(candidate) and os.listdir(candidate):
        n += 1
        candidate = os.path.join(parent, f"{name}_{n}")
    os.makedirs(candidate, exist_ok=True)
    return candidate


def lr_factor(config):
    """Linear warmup, then constant or cosine decay to zero."""
    def factor(step):
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        if config.lr_schedule == "cosine":
            progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return 1.0
    return factor


class BatchSampler:
    """Random batches that never mix buckets; reshuffled each epoch. Host-side randomness is
    Python's (not tensors), so choosing a batch never touches the device."""

    def __init__(self, data, batch_size, seed):
        self.groups = list(data.buckets().values())
        self.batch_size = batch_size
        self.generator = random.Random(seed)
        self.pending = []

    def _refill(self):
        batches = []
        for indices in self.groups:
            shuffled = list(indices)
            self.generator.shuffle(shuffled)
            batches += [shuffled[i:i + self.batch_size] for i in range(0, len(shuffled), self.batch_size)]
        self.generator.shuffle(batches)
        self.pending = batches

    def next(self):
        if not self.pending:
            self._refill()
        return self.pending.pop()

    def state(self):
        return {"generator": self.generator.getstate(), "pending": [list(b) for b in self.pending]}

    def load_state(self, state):
        self.generator.setstate(state["generator"])
        self.pending = [list(b) for b in state["pending"]]


class PreparedData:
    """Latents (model space) and, unless captions are encoded live, model inputs of every
    sample, on the training device."""

    def __init__(self, base_model, data, device, limit=None, cached_inputs=True, options=None):
        self.base_model, self.device, self.options = base_model, device, options or {}
        self.latents, self.inputs, self.empty_inputs, self.captions, self.sizes = [], [], [], [], []
        self.references = []  # edit pairs: each sample's reference latents (VAE space)
        for sample in data.samples[:limit]:
            latent = base_model.process_latent_in(sample.latent[None].float()).to(device, copy=True)[0]
            self.latents.append(latent)
            self.captions.append(list(sample.captions))
            self.sizes.append(sample.bucket)
            self.references.append(sample.reference_latents)
            if cached_inputs:
                # Reused every step, so built without autograd: some extra_conds run model layers
                # (LTX-2's text connectors), which may carry adapters; a graph through them would be
                # freed by the first backward.
                with torch.no_grad():
                    self.inputs.append([model_inputs(base_model, c, latent, device, sample.bucket, self.options,
                                                     sample.reference_latents) for c in sample.conditionings])
                    self.empty_inputs.append(model_inputs(base_model, data.empty_conditioning, latent, device,
                                                          sample.bucket, self.options, sample.reference_latents))

    def variants(self, index):
        return len(self.captions[index])

    def inputs_for(self, index, variant, text_encoder=None):
        """Model inputs of sample `index` with caption `variant` (None: the empty caption)."""
        if text_encoder is None:
            return self.empty_inputs[index] if variant is None else self.inputs[index][variant]
        text = "" if variant is None else self.captions[index][variant]
        return model_inputs(self.base_model, text_encoder.conditioning(text), self.latents[index], self.device,
                            self.sizes[index], self.options, self.references[index])


def transformer_options_of(patcher):
    """The transformer_options a forward of `patcher` runs with: its model options' and, as
    ComfyUI's sampler adds them (sampler_helpers.prepare_model_patcher), the patcher's wrappers
    and callbacks (torch.compile, other nodes' model wrappers)."""
    options = dict(patcher.model_options.get("transformer_options", {}))
    for name, extra in (("wrappers", patcher.wrappers), ("callbacks", patcher.callbacks)):
        options[name] = comfy.patcher_extension.merge_nested_dicts(dict(options.get(name, {})), extra)
    return options


def conditioning_options(config, family):
    """Inputs the trainer adds to every conditioning, as ComfyUI's nodes would (FluxGuidance…):
    the guidance value of guidance-distilled models, or None, which skips their guidance embedding.
    Without a value from the config or the family, the model's own ComfyUI default applies."""
    if config.bypass_guidance_embedding:
        return {"guidance": None}
    guidance = config.guidance if config.guidance >= 0 else family.guidance
    return {} if guidance is None else {"guidance": guidance}


def token_count(latent, diffusion_model, default_patch):
    """Tokens of a (B, C, [T,] h, w) latent as the model patchifies it: Flux's shift input. The
    spatial patch is the model's own `patch_size` where it has one (int or (t, h, w))."""
    patch = getattr(diffusion_model, "patch_size", None) or default_patch
    if isinstance(patch, (tuple, list)):
        patch = patch[-1]
    frames = latent.shape[2] if latent.ndim == 5 else 1
    return frames * (latent.shape[-2] // patch) * (latent.shape[-1] // patch)


def _prediction(base_model, transformer_options, x_t, sigma, inputs, dtype, cast_cache=True, copy_saved=False):
    # out-of-place residual adds: Flux/MMDiT blocks write `x += ...` into tensors autograd saved.
    # (A CUDA graph capture needs autocast's cast cache off: cached casts would outlive the capture.)
    with torch.autocast(x_t.device.type, dtype=dtype, enabled=dtype != torch.float32, cache_enabled=cast_cache), \
            OutOfPlaceAugmentedAssignments(), \
            (saved_activations_copied() if copy_saved else contextlib.nullcontext()):
        return base_model.apply_model(x_t, sigma, transformer_options=dict(transformer_options), **inputs)


def evaluation_loss(patcher, data, config, seed=1234, text_encoder=None):
    """Mean native-parameterization loss over fixed (noise, timestep) pairs per image: the same
    numbers before and after training, so the drop measures what was learned."""
    base = patcher.model
    device = patcher.load_device
    objective = Objective(base.model_sampling)
    with torch.no_grad():
        prepared = PreparedData(base, data, device, limit=config.eval_images, cached_inputs=text_encoder is None,
                                options=conditioning_options(config, family_of(base)))
        ms = base.model_sampling
        t_lo, t_hi = float(ms.timestep(ms.sigma_min.reshape(1))), float(ms.timestep(ms.sigma_max.reshape(1)))
        fractions = (torch.arange(config.eval_timesteps, dtype=torch.float32) + 0.5) / config.eval_timesteps
        sigmas = ms.sigma(t_lo + fractions * (t_hi - t_lo)).float().to(device)
        generator = torch.Generator().manual_seed(seed)
        total, count = 0.0, 0
        transformer_options = transformer_options_of(patcher)
        for index, latent in enumerate(prepared.latents):
            inputs = prepared.inputs_for(index, 0, text_encoder)
            model_loading.load(patcher, config.weights_vram_gib)  # (again, after the text encoder took the device)
            x0 = latent[None].expand(len(sigmas), *latent.shape)
            noise = torch.randn(x0.shape, generator=generator).to(device)
            x_t = objective.noisy_latent(x0, noise, sigmas)
            batch = batch_inputs([inputs] * len(sigmas))
            denoised = _prediction(base, transformer_options, x_t, sigmas,
                                   batch, config.torch_dtype)
            total += float(objective.loss(denoised, x0, sigmas).sum())
            count += len(sigmas)
    return total / count


class TrainingRun:
    """One run's moving parts, built in __init__ (nothing trained yet) and driven by train()."""

    def __init__(self, model_patcher, data, config, run_dir, clip=None, resume=None):
        if not data.samples:
            raise EriDiffusionError("TRAINING_DATA holds no samples; check the LoadDataset folder.")
        if config.text_encoder_lr > 0 and clip is None:
            raise EriDiffusionError("text_encoder_lr > 0 trains the text encoder: connect the graph's CLIP to "
                                    "LoRATrainer's clip input (or set text_encoder_lr to 0).")
        self.model_patcher, self.data, self.config, self.run_dir = model_patcher, data, config, run_dir
        # `source`: the input MODEL as training sees it (the same weights; reloaded as a plain
        # patcher where ComfyUI's dynamic VRAM manages the input); `patcher`: the clone trained on.
        self.source = trainable_model_clone(model_patcher)
        self.patcher = self.source.clone()
        self.base = self.patcher.model
        self.prefixes = loadable_weight_keys(self.base)
        self.device = self.patcher.load_device
        check_optimizer_runs(config.optimizer, self.device)  # before any heavy work

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
            self.adapters, used = adapters_from_tensors(self.patcher.model, resume.tensors, spec, self.prefixes,
                                                        resume.path)
            self.adapters.to(self.device).attach_to(self.patcher)
        if config.torch_compile:
            compile_blocks_injection(self.patcher)
        if config.gradient_checkpointing:
            checkpointing_injection(self.patcher, copy_saved=self.family.copies_saved_activations)
        self.text_encoder = None
        if config.text_encoder_lr > 0:
            self.text_encoder = TextEncoderTraining(clip, spec, config.seed,
                                                    resume.tensors if resume is not None else None,
                                                    resume.path if resume is not None else None)
        _warn_narrow_layers(spec, narrow_layers(self.adapters, self.base) + (
            narrow_layers(self.text_encoder.adapters, self.text_encoder.clip.patcher.model) if self.text_encoder else []))
        if resume is not None:
            te_used = self.text_encoder.used_keys if self.text_encoder else set()
            unused = sorted(set(resume.tensors) - used - te_used)
            if unused:
                raise EriDiffusionError(f"{resume.path} has weights this run would drop (e.g. {unused[0]}): "
                                        "text-encoder weights need a CLIP and text_encoder_lr > 0; others belong "
                                        "to another model.")

        groups = parameter_groups(self.adapters, config.learning_rate, self.text_encoder, config.text_encoder_lr)
        self.optimizer = make_optimizer(config.optimizer, groups, config.learning_rate, config.weight_decay,
                                        self.device)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_factor(config))
        # fp16 gradients underflow without loss scaling; bf16 and fp32 need none (the scaler is then a no-op).
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=config.dtype == "fp16"
                                           and self.device.type == "cuda")
        self.batches = BatchSampler(data, config.batch_size, config.seed)
        self.choice = random.Random(config.seed + 1)          # captions and dropout, host side
        self.noise_gen = torch.Generator(device=self.device).manual_seed(config.seed + 2)
        self.start_step, self.losses, self.eval_before = 0, [], None
        self.checkpoints = []
        if resume is not None and resume.state is not None:
            self._load_state(resume.state, resume.path)

    # --- the training state that makes a resumed run continue exactly
    def _state(self, step):
        return {"step": step, "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(), "batches": self.batches.state(),
                "choice": self.choice.getstate(), "noise": self.noise_gen.get_state(),
                "losses": list(self.losses), "eval_loss_before": self.eval_before,
                "config_fingerprint": config_fingerprint(self.config), "config": self.config.as_dict()}

    def _load_state(self, state, path):
        if state["config_fingerprint"] != config_fingerprint(self.config):
            changed = sorted(k for k, v in resumable_settings(self.config).items()
                             if state["config"].get(k) != v)
            raise EriDiffusionError(f"{state_path(path)} was written with other settings ({', '.join(changed)} "
                                    "differ); use the same settings to resume, or start a new run.")
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.batches.load_state(state["batches"])
        self.choice.setstate(state["choice"])
        self.noise_gen.set_state(state["noise"].to(self.noise_gen.get_state().device))
        self.start_step, self.losses = state["step"], list(state["losses"])
        self.eval_before = state["eval_loss_before"]

    def _export(self, step):
        text_encoder = (self.text_encoder.adapters, self.text_encoder.prefixes) if self.text_encoder else None
        return export_lora(self.adapters, self.prefixes, _metadata(self.base, self.config, self.data, step),
                           text_encoder=text_encoder)

    def save_checkpoint(self, step):
        path = os.path.join(self.run_dir, "checkpoints", f"{self.config.run_name}_step{step:06d}.safetensors")
        lora = self._export(step)
        check_finite(lora.tensors, lora.tensors, "fp32", path)  # before its state is written
        save_state(path, self._state(step))
        self.checkpoints.append(lora.save(path, dtype="fp32", overwrite=True))
        keep = self.config.keep_last
        if keep and len(self.checkpoints) > keep:
            for old in self.checkpoints[:-keep]:
                for file in (old, state_path(old)):
                    if os.path.exists(file):
                        os.remove(file)
            self.checkpoints = self.checkpoints[-keep:]

    # --- one optimizer step
    def _micro_batch(self, prepared, objective, transformer_options):
        indices = self.batches.next()
        x0 = torch.stack([prepared.latents[i] for i in indices])
        chosen = []
        for i in indices:
            dropped = self.data.caption_dropout > 0 and \
                self.choice.random() < self.data.caption_dropout
            variant = None if dropped else self.choice.randrange(prepared.variants(i))
            chosen.append(prepared.inputs_for(i, variant, self.text_encoder))
        noise = objective.noise(x0.shape, self.noise_gen, self.device).to(x0.dtype)
        sigma = objective.sample_sigmas(len(indices), self.noise_gen, self.device,
                                        tokens=token_count(x0, self.base.diffusion_model,
                                                                      self.family.latent_patch))
        x_t = objective.noisy_latent(x0, noise, sigma)
        if self.text_encoder is not None:
            model_loading.load(self.patcher, self.config.weights_vram_gib)  # encoding loaded the CLIP
        inputs = batch_inputs(chosen)
        loss = self.graphed(x_t, sigma, x0, inputs) if self.graphed is not None else None
        if loss is not None:
            return loss / self.config.grad_accum
        denoised = _prediction(self.base, transformer_options, x_t, sigma, inputs, self.config.torch_dtype,
                               copy_saved=self.family.copies_saved_activations)
        return objective.loss(denoised, x0, sigma).mean() / self.config.grad_accum

    def _graphed_loss(self, objective, transformer_options):
        """The micro-batch loss as CUDA graphs (config.cuda_graphs), else None."""
        setting = self.config.cuda_graphs
        streamed = self.config.weights_vram_gib > 0
        if setting == "off" or (setting == "auto" and (self.device.type != "cuda" or self.text_encoder is not None
                                                       or streamed)):
            return None
        if streamed:
            raise EriDiffusionError("cuda_graphs cannot replay weights streamed from CPU memory (weights_vram_gib > 0): "
                                    "set cuda_graphs to auto or off, or weights_vram_gib to 0.")
        if self.device.type != "cuda":
            raise EriDiffusionError(f"cuda_graphs needs a CUDA device; this model trains on {self.device}. "
                                    "Turn cuda_graphs off.")
        if self.text_encoder is not None:
            raise EriDiffusionError("cuda_graphs cannot hold the text encoder's live encoding: set text_encoder_lr "
                                    "to 0 or turn cuda_graphs off.")
        dtype = self.config.torch_dtype

        def loss(x_t, sigma, x0, inputs):
            denoised = _prediction(self.base, transformer_options, x_t, sigma, inputs, dtype, cast_cache=False,
                                   copy_saved=self.family.copies_saved_activations)
            return objective.loss(denoised, x0, sigma).mean()
        return GraphedLoss(loss, self.adapters, strict=setting == "on")

    def _trained_parameters(self):
        params = list(self.adapters.parameters())
        return params + (list(self.text_encoder.adapters.parameters()) if self.text_encoder else [])

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
            raise diverged_error(*bad[-1], self.config, self.start_step + 1, checkpoint,
                                 skipped_in_a_row=health.bad_in_a_row)

    def train(self, sample_settings, hooks):
        config, device = self.config, self.device
        if self.eval_before is None:
            self.eval_before = evaluation_loss(self.patcher, self.data, config, text_encoder=self.text_encoder)
        model_loading.load(self.patcher, config.weights_vram_gib)
        objective = self.objective
        prepared = PreparedData(self.base, self.data, device, cached_inputs=self.text_encoder is None,
                                options=conditioning_options(config, self.family))
        transformer_options = transformer_options_of(self.patcher)
        self.graphed = self._graphed_loss(objective, transformer_options)
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
            with training_forward():
                for _ in range(config.grad_accum):
                    loss = self._micro_batch(prepared, objective, transformer_options)
                    self.scaler.scale(loss).backward()
                    step_loss += loss.detach()
            self.scaler.unscale_(self.optimizer)
            norm = gradient_norm(self._trained_parameters(), config.max_grad_norm)
            finite = health.finite(step_loss, norm) if config.on_nan == "skip" else None
            self._optimizer_step(finite, skip_on_the_device)
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            health.record(step, step_loss, norm)

            done = step + 1
            stopping = hooks.should_stop is not None and done < config.steps and hooks.should_stop()
            last = done == config.steps or stopping
            checkpoint_due = config.save_every and done % config.save_every == 0 and not last
            sampling_due = sample_settings is not None and (done % sample_settings.every == 0 or last)
            new = None
            # checkpoints and samples come after a check: none is made from a diverged adapter
            if done % config.log_every == 0 or last or checkpoint_due or sampling_due:
                new, norms = health.read(logged, done)  # the one device sync of a logging step
                self.losses += new
                write_json_atomic(os.path.join(self.run_dir, "loss.json"), {"loss": self.losses})
                self._check_finite(health, logged, new, norms)
                logged = done
                if timed_from is None:
                    timed_from = (done, time.perf_counter())
            if hooks.on_progress is not None:
                stats = {"lr": self.scheduler.get_last_lr()[0]}
                if device.type == "cuda":  # allocator bookkeeping: no device sync
                    stats["peak_vram_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
                hooks.on_progress(done, config.steps, new, stats)
            if checkpoint_due:
                self.save_checkpoint(done)
            if sampling_due:
                samples, paths = render_samples(self.patcher, sample_settings, done,
                                                os.path.join(self.run_dir, "samples"))
                sample_paths += paths
                if hooks.on_samples is not None:
                    hooks.on_samples(done, samples, paths)
            if stopping:
                break

        finished = time.perf_counter()
        if timed_from is not None and done > timed_from[0]:
            seconds_per_step = (finished - timed_from[1]) / (done - timed_from[0])
        else:
            seconds_per_step = (finished - started) / max(1, done - self.start_step)
        peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
        self.save_checkpoint(done)

        self.adapters.requires_grad_(False)
        eval_after = evaluation_loss(self.patcher, self.data, config, text_encoder=self.text_encoder)
        return TrainResult(None, self._export(done), self.losses, self.eval_before, eval_after,
                           seconds_per_step, self.run_dir, list(self.checkpoints), samples, self.adapters,
                           sample_paths, peak, skipped_steps=health.skipped)

    def release(self):
        """Hand the training clones back to ComfyUI so their injections come off the shared modules."""
        model_loading.unload(self.patcher)
        if self.text_encoder is not None:
            self.text_encoder.unload()


def resumable_settings(config):
    """The settings a resumed run must share with the run that wrote the state."""
    values = config.as_dict()
    for free in ("steps", "run_name", "save_every", "keep_last", "log_every", "eval_timesteps", "eval_images",
                 "cuda_graphs", "weights_vram_gib", "torch_compile", "on_nan"):
        values.pop(free)
    return values


def config_fingerprint(config):
    return hashlib.sha256(json.dumps(resumable_settings(config), sort_keys=True).encode()).hexdigest()[:16]


def train_lora(model_patcher, data, config, run_dir, sample_settings=None, hooks=None, clip=None, resume=None):
    """Train, save checkpoints to run_dir, and return the trained MODEL (and CLIP) clones and LoRA."""
    run = TrainingRun(model_patcher, data, config, run_dir, clip=clip, resume=resume)
    try:
        result = run.train(sample_settings, hooks or TrainingHooks())
    finally:
        run.release()
    result.patcher = run.source.clone()
    run.adapters.attach_to(result.patcher)
    if run.text_encoder is not None:
        result.clip = run.text_encoder.result_clip()
    write_json_atomic(os.path.join(run_dir, "summary.json"), _summary(result, config))
    return result


def _warn_narrow_layers(spec, narrow):
    """One warning naming the layers whose rank is above their width."""
    if not narrow:
        return
    names = ", ".join(f"{name} ({width})" for name, width in narrow[:5]) + (", …" if len(narrow) > 5 else "")
    logging.warning(f"EriDiffusion: rank {spec.rank} (conv_rank {spec.conv_rank}) is larger than the width of "
                    f"{len(narrow)} adapted layers: {names}. An adapter of a layer cannot use more rank than its "
                    f"width, so the rest only adds parameters to the file; lower the rank to "
                    f"{min(width for _, width in narrow)} or less.")


def _metadata(base, config, data, steps):
    return {
        "eridiffusion_version": __version__,
        "architecture": type(base.model_config).__name__,
        "steps": str(steps),
        "dataset_hash": data.dataset_fingerprint,
        "resolution": str(data.resolution),
        "training_config": json.dumps(config.as_dict()),
    }


def _summary(result, config):
    return {"steps": len(result.losses), "planned_steps": config.steps, "eval_loss_before": result.eval_loss_before,
            "eval_loss_after": result.eval_loss_after, "first_loss": result.losses[0], "last_loss": result.losses[-1],
            "seconds_per_step": result.seconds_per_step, "peak_memory_gib": result.peak_memory_gib,
            "skipped_steps": result.skipped_steps,
            "checkpoints": result.checkpoints, "samples": result.sample_paths, "config": config.as_dict()}


