"""The training loop: setup, loop, evaluation, checkpoints — in that order, top to bottom.

Works on a ComfyUI ModelPatcher and the TrainingData of CacheLatents. The input patcher is
never changed: training happens on a clone with adapters injected in bypass form, and the
result is another clone of the input with the trained adapters attached.
"""
import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

import comfy.model_management

from .. import __version__
from .adapters import attach_adapters
from .atomic_file import write_atomic
from .autograd_weights import frozen_weights_injection
from .checkpointing import checkpointing_injection
from .errors import EriDiffusionError
from .lora_format import export_lora, loadable_weight_keys
from .model_inputs import batch_inputs, model_inputs
from .objective import Objective
from .sample_render import render_samples


@dataclass
class TrainingHooks:
    """How a caller watches and steers a run; every hook is optional."""
    on_progress: Optional[Callable] = None    # (step, total, new_losses or None, stats dict)
    check_cancel: Optional[Callable] = None   # raises to stop the run (ComfyUI's cancel)
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
    sample_paths: list = field(default_factory=list)
    peak_memory_gib: float = 0.0


def unique_run_dir(parent, name):
    """parent/name, or parent/name_2, _3 … when an earlier run already wrote there."""
    candidate, n = os.path.join(parent, name), 1
    while os.path.exists(candidate) and os.listdir(candidate):
        n += 1
        candidate = os.path.join(parent, f"{name}_{n}")
    os.makedirs(candidate, exist_ok=True)
    return candidate


def make_optimizer(config, params, device):
    if config.optimizer == "AdamW8bit":
        if device.type != "cuda":
            raise EriDiffusionError("optimizer AdamW8bit (bitsandbytes) needs a CUDA GPU; this run is on "
                                    f"{device.type}. Choose AdamW.")
        import bitsandbytes
        return bitsandbytes.optim.AdamW8bit(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    return torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay,
                             fused=device.type == "cuda")


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
    """Random batches that never mix buckets; reshuffled each epoch, from a seeded CPU generator."""

    def __init__(self, data, batch_size, seed):
        self.groups = list(data.buckets().values())
        self.batch_size = batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self.pending = []

    def _refill(self):
        batches = []
        for indices in self.groups:
            order = torch.randperm(len(indices), generator=self.generator).tolist()
            shuffled = [indices[i] for i in order]
            batches += [shuffled[i:i + self.batch_size] for i in range(0, len(shuffled), self.batch_size)]
        order = torch.randperm(len(batches), generator=self.generator).tolist()
        self.pending = [batches[i] for i in order]

    def next(self):
        if not self.pending:
            self._refill()
        return self.pending.pop()


class _PreparedData:
    """Latents (model space) and model inputs of every sample, on the training device."""

    def __init__(self, base_model, data, device, limit=None):
        self.latents, self.inputs, self.empty_inputs = [], [], []
        for sample in data.samples[:limit]:
            latent = base_model.process_latent_in(sample.latent[None].float()).to(device, copy=True)[0]
            self.latents.append(latent)
            self.inputs.append([model_inputs(base_model, c, latent, device) for c in sample.conditionings])
            self.empty_inputs.append(model_inputs(base_model, data.empty_conditioning, latent, device))


def _prediction(base_model, transformer_options, x_t, sigma, inputs, dtype):
    with torch.autocast(x_t.device.type, dtype=dtype, enabled=dtype != torch.float32):
        return base_model.apply_model(x_t, sigma, transformer_options=dict(transformer_options), **inputs)


def evaluation_loss(patcher, data, config, seed=1234):
    """Mean native-parameterization loss over fixed (noise, timestep) pairs per image: the same
    numbers before and after training, so the drop measures what was learned."""
    base = patcher.model
    device = patcher.load_device
    comfy.model_management.load_models_gpu([patcher], force_full_load=True)
    objective = Objective(base.model_sampling)
    prepared = _PreparedData(base, data, device, limit=config.eval_images)
    ms = base.model_sampling
    t_lo, t_hi = float(ms.timestep(ms.sigma_min.reshape(1))), float(ms.timestep(ms.sigma_max.reshape(1)))
    fractions = (torch.arange(config.eval_timesteps, dtype=torch.float32) + 0.5) / config.eval_timesteps
    sigmas = ms.sigma(t_lo + fractions * (t_hi - t_lo)).float().to(device)
    generator = torch.Generator().manual_seed(seed)
    total, count = 0.0, 0
    with torch.no_grad():
        for latent, inputs in zip(prepared.latents, prepared.inputs):
            x0 = latent[None].expand(len(sigmas), *latent.shape)
            noise = torch.randn(x0.shape, generator=generator).to(device)
            x_t = objective.noisy_latent(x0, noise, sigmas)
            batch = batch_inputs([inputs[0]] * len(sigmas))
            denoised = _prediction(base, patcher.model_options.get("transformer_options", {}), x_t, sigmas,
                                   batch, config.torch_dtype)
            total += float(objective.loss(denoised, x0, sigmas).sum())
            count += len(sigmas)
    return total / count


def _unload(patcher):
    """Hand the training clone back to ComfyUI's memory manager so its injections come off."""
    for loaded in list(comfy.model_management.current_loaded_models):
        if loaded.model is patcher:
            loaded.model_unload()
            comfy.model_management.current_loaded_models.remove(loaded)


def train_lora(model_patcher, data, config, run_dir, sample_settings=None, hooks=None):
    hooks = hooks or TrainingHooks()
    if not data.samples:
        raise EriDiffusionError("TRAINING_DATA holds no samples; check the LoadDataset folder.")
    base = model_patcher.model
    prefixes = loadable_weight_keys(base)

    # --- setup: a clone with autograd-safe weights, adapters, optional checkpointing
    patcher = model_patcher.clone()
    if base.get_dtype() != config.torch_dtype:
        patcher.set_model_compute_dtype(config.torch_dtype)
    frozen_weights_injection(patcher)
    adapters = attach_adapters(patcher, config.adapter, prefixes.keys(), seed=config.seed)
    if config.gradient_checkpointing:
        checkpointing_injection(patcher)
    device = patcher.load_device
    optimizer = make_optimizer(config, list(adapters.parameters()), device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(config))
    # fp16 gradients underflow without loss scaling; bf16 and fp32 need none (the scaler is then a no-op).
    scaler = torch.amp.GradScaler(device.type, enabled=config.dtype == "fp16" and device.type == "cuda")

    # The clone's injections touch the shared modules while it is loaded: always hand it back.
    try:
        eval_before = evaluation_loss(patcher, data, config)
        comfy.model_management.load_models_gpu([patcher], force_full_load=True)
        objective = Objective(base.model_sampling)
        prepared = _PreparedData(base, data, device)
        batches = BatchSampler(data, config.batch_size, config.seed)
        choice = torch.Generator().manual_seed(config.seed + 1)          # captions and dropout, CPU side
        noise_gen = torch.Generator(device=device).manual_seed(config.seed + 2)
        transformer_options = patcher.model_options.get("transformer_options", {})
        losses_on_device = torch.zeros(config.steps, device=device)
        losses, checkpoints, sample_paths, samples = [], [], [], None
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

        def save_checkpoint(step):
            lora = export_lora(adapters, prefixes, _metadata(base, config, data, step))
            path = os.path.join(run_dir, "checkpoints", f"{config.run_name}_step{step:06d}.safetensors")
            checkpoints.append(lora.save(path, dtype="fp32", overwrite=True))

        # --- loop
        started, timed_from = time.perf_counter(), None
        logged = 0
        for step in range(config.steps):
            if hooks.check_cancel is not None:
                hooks.check_cancel()
            step_loss = torch.zeros((), device=device)
            for _ in range(config.grad_accum):
                indices = batches.next()
                x0 = torch.stack([prepared.latents[i] for i in indices])
                chosen = []
                for i in indices:
                    if data.caption_dropout > 0 and float(torch.rand((), generator=choice)) < data.caption_dropout:
                        chosen.append(prepared.empty_inputs[i])
                    else:
                        variants = prepared.inputs[i]
                        chosen.append(variants[int(torch.randint(len(variants), (), generator=choice))])
                noise = torch.randn(x0.shape, generator=noise_gen, device=device, dtype=x0.dtype)
                sigma = objective.sample_sigmas(len(indices), noise_gen, device)
                x_t = objective.noisy_latent(x0, noise, sigma)
                denoised = _prediction(base, transformer_options, x_t, sigma, batch_inputs(chosen), config.torch_dtype)
                loss = objective.loss(denoised, x0, sigma).mean() / config.grad_accum
                scaler.scale(loss).backward()
                step_loss += loss.detach()
            scaler.unscale_(optimizer)
            if config.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(adapters.parameters(), config.max_grad_norm)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses_on_device[step] = step_loss

            done = step + 1
            if done % config.log_every == 0 or done == config.steps:
                new = losses_on_device[logged:done].tolist()  # the one device sync of a logging step
                losses += new
                logged = done
                if timed_from is None:
                    timed_from = (done, time.perf_counter())
                _write_loss_log(run_dir, losses)
            else:
                new = None
            if hooks.on_progress is not None:
                hooks.on_progress(done, config.steps, new, {"lr": scheduler.get_last_lr()[0]})
            if config.save_every and done % config.save_every == 0 and done < config.steps:
                save_checkpoint(done)
            if sample_settings is not None and (done % sample_settings.every == 0 or done == config.steps):
                samples, paths = render_samples(patcher, sample_settings, done, os.path.join(run_dir, "samples"))
                sample_paths += paths
                if hooks.on_samples is not None:
                    hooks.on_samples(done, samples, paths)

        finished = time.perf_counter()
        if timed_from is not None and config.steps > timed_from[0]:
            seconds_per_step = (finished - timed_from[1]) / (config.steps - timed_from[0])
        else:
            seconds_per_step = (finished - started) / config.steps
        peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
        save_checkpoint(config.steps)

        # --- evaluation and the result: the trained adapters on a fresh clone of the input
        adapters.requires_grad_(False)
        eval_after = evaluation_loss(patcher, data, config)
    finally:
        _unload(patcher)
    result_patcher = model_patcher.clone()
    adapters.attach_to(result_patcher)
    lora = export_lora(adapters, prefixes, _metadata(base, config, data, config.steps))
    result = TrainResult(result_patcher, lora, losses, eval_before, eval_after, seconds_per_step, run_dir,
                         checkpoints, samples, sample_paths, peak)
    _write_json(os.path.join(run_dir, "summary.json"), _summary(result, config))
    return result


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
    return {"steps": config.steps, "eval_loss_before": result.eval_loss_before,
            "eval_loss_after": result.eval_loss_after, "first_loss": result.losses[0], "last_loss": result.losses[-1],
            "seconds_per_step": result.seconds_per_step, "peak_memory_gib": result.peak_memory_gib,
            "checkpoints": result.checkpoints, "samples": result.sample_paths, "config": config.as_dict()}


def _write_json(path, value):
    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(value, f, indent=1)
    write_atomic(path, write, overwrite=True)


def _write_loss_log(run_dir, losses):
    _write_json(os.path.join(run_dir, "loss.json"), {"loss": losses})
