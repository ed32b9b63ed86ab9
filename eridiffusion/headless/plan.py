"""The plan `--dry-run` prints: the model family ComfyUI detected, the dataset's buckets, the steps
and epochs, the adapter's size and an estimate of the device memory it all takes, without encoding
or training anything."""

import collections
import dataclasses
import os

from ..training.run.config import TrainConfig
from .run import Inputs
from .run_config import RunConfig

# Bytes of optimizer state per trained parameter (fp32 moments; 8-bit: one byte each).
OPTIMIZER_STATE_BYTES = {
    "AdamW": 8,
    "AdamW8bit": 2,
    "PagedAdamW": 8,
    "PagedAdamW8bit": 2,
    "Lion": 4,
    "Lion8bit": 1,
    "Prodigy": 16,
    "Adafactor": 4,
}
GIB = 2**30


def buckets(dataset, resolution):
    """{(width, height): images}, each image counted `repeats` times, as CacheLatents buckets them."""
    from ..training.data.buckets import bucket_for

    counts = collections.Counter(bucket_for(r.width, r.height, resolution) for r in dataset.records)
    return {size: n * dataset.repeats for size, n in sorted(counts.items())}


def resolutions(config):
    """The sizes CacheLatents encodes at: resolution, then its extra_resolutions."""
    from ..training.data.training_data import CacheSettings

    return (config.cache["resolution"], *CacheSettings(**config.cache).extras())


def latent_bytes_of(record, dataset, resolution, model, vae):
    """Bytes of one image's (clip's) fp32 latent on the training device."""
    from ..training.data.buckets import bucket_for

    width, height = bucket_for(record.width, record.height, resolution)
    ratio = vae.spacial_compression_encode()
    frames = (dataset.video.frames - 1) // (vae.temporal_compression_decode() or 1) + 1 if record.clip else 1
    return model.model.latent_format.latent_channels * frames * (width // ratio) * (height // ratio) * 4


def adapter_parameters(model, settings, family):
    """(layers, parameters) of the adapters the trainer would attach to `model`."""
    from ..formats.lora_file import loadable_weight_keys
    from ..training.adapters.attach import FULL, target_layers
    from ..training.model.families import resolve_targets

    spec = dataclasses.replace(settings.adapter, targets=resolve_targets(settings.adapter.targets, family))
    layers = target_layers(model.model, spec, loadable_weight_keys(model.model).keys())
    if spec.algorithm == FULL:  # the layers' own weight and bias, trained as copies (fine_tune_dtype)
        return len(layers), sum(p.numel() for _, layer in layers for p in layer.parameters(recurse=False))
    count = sum(p.numel() for index, (_, layer) in enumerate(layers) for p in spec.build(layer, index).parameters())
    return len(layers), count


def plan_lines(config: RunConfig, inputs: Inputs, settings: TrainConfig, output: str, processes: int = 1) -> list[str]:
    """The dry run's report, one line per item (`processes`: the run's, each on its own device)."""
    from ..training.model.families import resolve_objective

    family, dataset, model = inputs.family, inputs.dataset, inputs.model
    per_size = {resolution: buckets(dataset, resolution) for resolution in resolutions(config)}
    images = sum(n for sizes in per_size.values() for n in sizes.values())
    seen = settings.steps * settings.batch_size * settings.grad_accum * processes
    layers, parameters = adapter_parameters(model, settings, family)
    objective = resolve_objective(settings.objective, family)
    what = "clips and images" if dataset.has_clips else "images"
    return [
        f"config   {config.path} ({config.schema} format)",
        (
            f"model    {config.model.describe()}: ComfyUI {type(model.model.model_config).__name__} -> {family.name} "
            f"({family.prediction}; timestep sampling {objective.timestep_sampling})"
        ),
        (
            f"dataset  {dataset.folder}: {len(dataset.records)} {what}"
            f" x {dataset.repeats} repeat{'s' if dataset.repeats > 1 else ''}"
        ),
        *(
            f"buckets  at {resolution}: " + ", ".join(f"{w}x{h} x{n}" for (w, h), n in sizes.items())
            for resolution, sizes in per_size.items()
        ),
        (
            f"steps    {settings.steps} x batch {settings.batch_size} x grad_accum {settings.grad_accum}"
            + (f" x {processes} processes" if processes > 1 else "")
            + f" = {seen} images seen, {seen / images:.1f} epochs"
        ),
        _trained_line(settings, layers, parameters),
        _memory_line(config, inputs, settings, parameters, processes),
        *_output_lines(config, settings, output),
    ]


def _trained_line(settings, layers, parameters):
    from ..training.adapters.attach import FULL

    adapter = settings.adapter
    if adapter.algorithm == FULL:
        held = settings.precision.fine_tune_dtype
        rounded = (
            " (updates rounded stochastically)" if held == "bf16" and settings.precision.stochastic_rounding else ""
        )
        trained = f"{parameters / 1e6:.2f} M parameters, trained as {held} copies{rounded}"
        return f"weights  full fine-tune of {layers} layers: {trained}"
    return (
        f"adapter  {adapter.algorithm} rank {adapter.rank} alpha {adapter.alpha:g} on {layers} layers: "
        f"{parameters / 1e6:.2f} M parameters" + (" (and the text encoders')" if settings.text_encoder_lr > 0 else "")
    )


def _memory_line(config, inputs, settings, parameters, processes):
    """An estimate of the device memory the run takes: weights, adapters and their state, latents."""
    import comfy.model_management

    from ..training.adapters.attach import FULL

    dataset, model = inputs.dataset, inputs.model
    weights = sum(p.numel() * p.element_size() for p in model.model.parameters())
    resident = min(weights, settings.weights_vram_gib * GIB) if settings.weights_vram_gib else weights
    # the trained tensors (fp32, or a fine-tune's bf16 ones), their gradients (fused: one tensor's at a time)
    held = 2 if settings.adapter.algorithm == FULL and settings.precision.fine_tune_dtype == "bf16" else 4
    adapter_bytes = parameters * (
        held + (0 if settings.fused_backward else held) + OPTIMIZER_STATE_BYTES[settings.optimizer]
    )
    sharded = f" (1/{processes} of them each: sharding fsdp)" if settings.precision.sharding == "fsdp" else ""
    adapter_bytes //= processes if sharded else 1
    latent_bytes = sum(
        latent_bytes_of(record, dataset, resolution, model, inputs.vae)
        for resolution in resolutions(config)
        for record in dataset.records
    )
    device = comfy.model_management.get_torch_device()
    activations = (
        "activations come on top (with gradient_checkpointing, about one block's)"
        if settings.gradient_checkpointing
        else "activations of the whole forward come on top"
    )
    if settings.vram_budget_gib or settings.blocks_to_swap:
        return _swap_line(model, settings, adapter_bytes + latent_bytes)
    return (
        f"memory   about {(resident + adapter_bytes + latent_bytes) / GIB:.2f} GiB on "
        + (f"each of {processes} devices" if processes > 1 else f"{device}")
        + ": weights "
        f"{resident / GIB:.2f}, adapters with gradients and {settings.optimizer} state {adapter_bytes / GIB:.2f}"
        f"{sharded}, "
        f"latents {latent_bytes / GIB:.3f}; {activations}"
    )


def _swap_line(model, settings, other_bytes):
    """The memory line of a run whose blocks block swap places (training/memory/swap_plan.py)."""
    from ..training.memory.swap_plan import SLOTS, smallest_weights_bytes, spread, weights_in_blocks

    diffusion_model = model.model.diffusion_model
    blocks, outside = weights_in_blocks(diffusion_model)
    if settings.blocks_to_swap:
        ring = spread(min(settings.blocks_to_swap, len(blocks)), len(blocks))
        held = sum(size for p, size in enumerate(blocks) if p not in ring)
        on_device = outside + held + SLOTS * max((blocks[p] for p in ring), default=0)
        how = f"blocks_to_swap {settings.blocks_to_swap} of its {len(blocks)} blocks in CPU memory"
    else:
        on_device = smallest_weights_bytes(diffusion_model)
        how = (
            f"vram_budget_gib {settings.vram_budget_gib:g}: the first step runs with all {len(blocks)} blocks in "
            "CPU memory, then as many are held on the device as the budget leaves room for"
        )
    return (
        f"memory   {how}; weights on the device {on_device / GIB:.2f} GiB (of {(outside + sum(blocks)) / GIB:.2f}), "
        f"adapters, their state and latents {other_bytes / GIB:.2f}; activations come on top"
    )


def _output_lines(config, settings, output):
    """The samples, the files written and the settings left unapplied."""
    lines = []
    if config.sample is not None:
        prompts = [p for p in config.sample["prompts"].splitlines() if p.strip()]
        lines.append(
            f"samples  {len(prompts)} prompt{'s' if len(prompts) > 1 else ''} every {config.sample['every']} "
            f"steps and at the end, {config.sample['width']}x{config.sample['height']}, "
            f"{config.sample['steps']} sampling steps"
        )
    every = f"every {settings.save_every} steps and at the end" if settings.save_every else "at the end"
    lines.append(
        f"writes   {os.path.join(output, settings.run_name)}/ (or _2, _3 ...; checkpoints {every}), "
        f"{os.path.join(output, 'loras', config.save['filename_prefix'])}.safetensors "
        f"({config.save['dtype']})"
    )
    if config.unsupported:
        lines.append(f"ignored  {len(config.unsupported)} setting(s) not supported yet (see the warning above)")
    return lines
