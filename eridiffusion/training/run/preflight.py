"""Every refusal of a run, asked once: `preflight(request)` runs CHECKS in order on a RunRequest before
the run makes its folder, loads anything more or encodes an image, and the run trusts it afterwards.
LoRATrainer, the command line's `train` and its `--dry-run` each call it, so a mistake is named the
same way wherever it is made, and a new refusal is one more entry in CHECKS."""

import dataclasses
import os

from ...errors import EriDiffusionError
from ...formats.lora_file import loadable_weight_keys
from ...formats.state_file import shards_path
from ..adapters.attach import LINEAR_LIKE_ALGORITHMS, target_layers
from ..adapters.layer_selection import block_multipliers
from ..adapters.preload import wait_for_preloads
from ..memory import check_vram_budget
from ..model.families import family_of, resolve_targets
from ..model.inputs import check_takes_start_image
from ..model.text_encoder import check_text_encoders
from ..samples.inputs import reads_condition, takes_inpaint_channels
from ..speed.fp8_products import check_fp8_compute
from ..speed.step_path import check_graphs_can_run
from ..trained import WEIGHTS_BUILDERS, check_sharded_inputs, check_sharding, check_weights_trainable
from .experts import check_expert_boundary, check_expert_pair, check_experts, check_one_model
from .fused_backward import check_fused_backward
from .optimizers import check_optimizer_runs
from .request import RunRequest
from .resume import check_resume_fits
from .run_state import check_resumable, check_state_fits_data

# Below this share of the loss weight (masked pixels at their mask's value, the rest at mask_min)
# over all the images, a run trains on almost nothing.
MIN_TRAINED_SHARE = 0.01


def preflight(request: RunRequest, checks: tuple | None = None) -> None:
    """Raise the EriDiffusionError of the first thing the run `request` cannot do: CHECKS in order, or
    `checks` of them (SETTINGS_CHECKS: those that need neither the models nor the data, which the command
    line asks before it loads any model)."""
    wait_for_preloads()  # (its checks import what a preload may be importing: not from two threads at once)
    for check in CHECKS if checks is None else checks:
        check(request)


def check_processes(request: RunRequest) -> None:
    """A device named for a run of several processes, each of which trains on its own GPU."""
    config, processes = request.config, request.processes
    if processes.distributed and config.device != "auto":
        raise EriDiffusionError(
            f"device {config.device}: a run of {processes.world_size} processes trains each on its own GPU "
            "(torchrun's LOCAL_RANK); set device to auto."
        )


def check_resume_settings(request: RunRequest) -> None:
    """A resume point the run cannot continue: other settings, or a step at or past `steps`."""
    check_resume_point(request.resume, request.config, request.processes.world_size)


def check_data_and_inputs(request: RunRequest) -> None:
    """Data to train on, and the inputs the settings need: a CLIP to train or to encode with."""
    config, clip, facts = request.config, request.clip, request.facts
    if not facts.samples:
        raise EriDiffusionError("TRAINING_DATA holds no samples; check the LoadDataset folder.")
    if config.text_encoder_lr > 0 and clip is None:
        raise EriDiffusionError(
            "text_encoder_lr > 0 trains the text encoder: connect the graph's CLIP to "
            "LoRATrainer's clip input (or set text_encoder_lr to 0)."
        )
    if config.text_encoder_lr > 0:
        check_text_encoders(clip, config.adapter.text_encoders)
        missing = [path for path in facts.shown_pictures if not os.path.isfile(path)]
        if missing:
            raise EriDiffusionError(
                f"{missing[0]} is gone ({len(missing)} of the reference images missing): the trained text encoder "
                "is shown each caption's reference images every step, read from their files; put them back, or "
                "run CacheLatents again on the dataset as it is now (or set text_encoder_lr to 0)."
            )
    if config.preservation_prompt.strip() and clip is None:
        raise EriDiffusionError(
            "preservation_prompt needs the text encoder to encode the class phrase: connect the graph's "
            "CLIP to LoRATrainer's clip input (or clear preservation_prompt)."
        )


def check_data_fits_settings(request: RunRequest) -> None:
    """Settings that mean nothing with this data, and masks that leave nothing to learn."""
    facts = request.facts
    check_settings_fit_data(request.config, facts.validation, facts.regularization)
    check_masks(list(facts.masked), facts.unmasked, request.config.mask_min)


def check_resume_fits_run(request: RunRequest) -> None:
    """A resume point whose weights do not fit the MODEL, or whose state draws images this data lacks."""
    check_resume_fits(request.resume, request.model, request.clip, request.config)
    if request.resume is not None and request.resume.state is not None:
        facts = request.facts
        check_state_fits_data(request.resume.state, request.resume.path, facts.samples, facts.class_samples)


def check_models(request: RunRequest) -> None:
    """Models EriDiffusion trains; two experts of one architecture, with settings two experts take."""
    for model in request.models:
        family_of(model.model)  # (an error naming what it is, for a model no LoRA of ours trains)
    config = request.config
    if request.low_noise_model is None:
        check_one_model(config)
        return
    check_experts(config, request.facts.validation, request.clip, request.resume, request.processes)
    check_expert_pair(request.model, request.low_noise_model)
    check_expert_boundary(config, family_of(request.model.model))


def check_models_read_data(request: RunRequest) -> None:
    """What each loaded model cannot do with the data and the samples: an input layout ComfyUI's class
    cannot fill, inpaint data, edit references, start images or sound it would not read, a sample prompt
    setting it ignores."""
    facts, samples = request.facts, request.samples
    for model in (each.model for each in request.models):
        check_flux_input_layout(model)
        check_inpaint_fits(model, facts.inpaint)
        check_references_read(model, facts.references)
        check_takes_start_image(model, facts.start_image_sample())
        check_audio_read(model, facts.audio, samples is not None and samples.audio_vae is not None)
        check_samples_read(model, samples)


def check_weights_train(request: RunRequest) -> None:
    """A model's own weights (algorithm full, or a weights run resumed) trained from weights ComfyUI loaded
    as they can be trained and saved, with settings that train beside them; fine_tune_dtype for them alone."""
    if request.builder in WEIGHTS_BUILDERS:
        for model in request.models:
            check_weights_trainable(model.model, request.config)
    elif request.config.precision.fine_tune_dtype != "fp32":
        raise EriDiffusionError(
            f"fine_tune_dtype {request.config.precision.fine_tune_dtype} holds algorithm full's trained weights in "
            f"it, and this run trains adapters ({request.spec.algorithm}), which keep fp32 master weights: set "
            "fine_tune_dtype to fp32, or algorithm to full."
        )


def check_sharded_run(request: RunRequest) -> None:
    """sharding fsdp: a model's own weights, trained by several processes, with settings FSDP runs with."""
    check_sharding(request.config, request.builder in WEIGHTS_BUILDERS, request.processes.world_size)


def check_sharded_inputs_fit(request: RunRequest) -> None:
    """sharding fsdp: no samples rendered during training, one model."""
    samples, experts = request.samples is not None, request.low_noise_model is not None
    check_sharded_inputs(request.config, samples, experts)


def check_adapters_attach(request: RunRequest) -> None:
    """The adapter's targets match layers of each model, and block_lr leaves some of them training."""
    config = request.config
    spec = request.spec
    if not spec.train_diffusion_model:  # the text encoders alone train
        return
    for model in (each.model for each in request.models):
        targets = resolve_targets(spec.targets, family_of(model))
        layers = target_layers(model, dataclasses.replace(spec, targets=targets), loadable_weight_keys(model).keys())
        if config.block_lr.strip():
            check_block_multipliers(block_multipliers([name for name, _ in layers], config.block_lr), config.block_lr)


def check_device_runs(request: RunRequest) -> None:
    """The optimizer (stepping as fused_backward asks), fp8 products and CUDA graphs the settings ask for
    run on the training device."""
    config, device = request.config, request.device
    check_fused_backward(config, request.processes.world_size)
    check_optimizer_runs(config.optimizer, device)
    if config.fp8_compute:
        check_fp8_compute(device)
    check_graphs_can_run(config, device)


def check_memory_plan(request: RunRequest) -> None:
    """vram_budget_gib and blocks_to_swap fit each model and the device, before the weights load."""
    config = request.config
    if config.vram_budget_gib > 0 and request.low_noise_model is not None:
        raise EriDiffusionError(
            "vram_budget_gib plans one model's memory from its first step, and this run trains two experts: "
            "set blocks_to_swap (the blocks of each expert kept in CPU memory) instead, vram_budget_gib to 0."
        )
    for model in request.models:
        check_vram_budget(config, model.model.diffusion_model, request.device)
    check_base_quantization(config)


def check_base_quantization(config) -> None:
    """base_quantization with what it can train beside: an adapter on the layer's output (not one that needs
    the weight), no block swap or fp8 products of the same layers, and bitsandbytes installed."""
    fmt = config.base_quantization
    if fmt == "none":
        return
    if config.adapter.algorithm not in LINEAR_LIKE_ALGORITHMS:
        raise EriDiffusionError(
            f"base_quantization {fmt} holds each layer's weight quantized, and {config.adapter.algorithm} needs the "
            f"weight itself: train {', '.join(LINEAR_LIKE_ALGORITHMS)} on a quantized base, or set base_quantization "
            "to none."
        )
    clash = [
        name
        for name, on in (
            ("vram_budget_gib", config.vram_budget_gib > 0),
            ("blocks_to_swap", config.blocks_to_swap > 0),
            ("fp8_compute", config.fp8_compute),
            ("weights_vram_gib", config.weights_vram_gib > 0),
        )
        if on
    ]
    if clash:
        raise EriDiffusionError(
            f"base_quantization {fmt} with {', '.join(clash)}: both place the base's weights; use one of them "
            "(a quantized base alone, or block swap with base_quantization none)."
        )
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as error:
        raise EriDiffusionError(
            f"base_quantization {fmt} needs bitsandbytes ({error}): pip install bitsandbytes, or set "
            "base_quantization to none."
        ) from None


def check_audio_read(model, trained, sampled):
    """Clips' sound (CacheLatents' audio_vae: `trained`) and samples drawn with it (SampleDuringTraining's
    audio_vae: `sampled`) need an audio-video model (LTX-2, ComfyUI's LTXAV); any other has no audio stream."""
    import comfy.model_base

    if isinstance(model, getattr(comfy.model_base, "LTXAV", ())) or not (trained or sampled):
        return
    node = (
        "CacheLatents' audio_vae encoded each clip's sound"
        if trained
        else "SampleDuringTraining's audio_vae draws the samples with their sound"
    )
    raise EriDiffusionError(
        f"{node}, but ComfyUI loaded this model as {type(model.model_config).__name__}, which has no audio stream; "
        "train LTX-2 (its audio-video model) with its audio VAE, or leave audio_vae unconnected."
    )


def check_samples_read(model, sample_settings):
    """Each sample prompt's own settings (--g, --ref, --image) are ones `model` reads."""
    for prompt in sample_settings.renders() if sample_settings is not None else ():
        prompt.checked_for(model)


def check_flux_input_layout(model):
    """A Flux-family model whose input channels ComfyUI's Flux cannot fill (Flex.2 stacks the noise, an
    inpainting image, its mask and a control image: 49 channels) fails in its first forward; name it
    before anything runs."""
    import comfy.model_base

    if not isinstance(model, comfy.model_base.Flux):
        return
    config = model.model_config.unet_config
    c_in, c_out = config.get("in_channels"), config.get("out_channels")
    if c_in is None or c_out is None or c_in in (c_out, 2 * c_out, 2 * c_out + 64):
        return
    raise EriDiffusionError(
        f"ComfyUI loaded this model as {type(model.model_config).__name__} with {c_in} input channels, but its Flux "
        f"fills {c_out} (text-to-image), {2 * c_out} (an image beside the noise, as Kontext-style models) or "
        f"{2 * c_out + 64} (Flux Fill: the masked image and its mask); a model of another layout (Flex.2's noise, "
        "inpainting image, mask and control image) needs its maker's ComfyUI nodes, which EriDiffusion cannot "
        "train through."
    )


def check_inpaint_fits(model, given):
    """An inpainting model (input channels for a masked image and its mask) trains on data cached with
    CacheLatents' inpaint (`given`), and only such a model does: either way round the inputs would be
    silently wrong (the host's empty image and full mask) or unused."""
    takes = takes_inpaint_channels(model)
    name = type(model.model_config).__name__
    if takes and not given:
        raise EriDiffusionError(
            f"ComfyUI loaded this model as {name}, an inpainting model that reads a masked image and its mask: "
            "turn on CacheLatents' inpaint (and give the images masks in masks/, white = the region to fill)."
        )
    if given and not takes:
        raise EriDiffusionError(
            f"CacheLatents' inpaint is on (masked images), but {name} has no inpainting inputs to read them; "
            "turn inpaint off (masks/ then weigh the loss), or train an inpainting model (Flux Fill)."
        )


def check_references_read(model, given):
    """Edit references (`given`: the data has some) reach only a model whose ComfyUI class reads reference
    latents; any other would train on the targets alone, the references encoded and silently unused."""
    if given and not reads_condition(model, "reference_latents"):
        raise EriDiffusionError(
            f"the dataset pairs its images with edit references (control/ folders or metadata.jsonl's control "
            f"columns), but ComfyUI loaded this model as {type(model.model_config).__name__}, which reads none; "
            "train an edit model (Flux Kontext, Flux.2, Qwen-Image-Edit), or move the references out of the dataset."
        )


def check_settings_fit_data(config, has_validation, has_regularization):
    """Settings that mean nothing, or silently nothing, with the data connected."""
    if has_regularization and config.prior_weight == 0:
        raise EriDiffusionError(
            "regularization images are connected to CacheLatents but prior_weight is 0, so they would be "
            "drawn and ignored: raise prior_weight (DreamBooth uses 1.0) or disconnect them."
        )
    if config.early_stop_patience and not has_validation:
        raise EriDiffusionError(
            f"early_stop_patience is {config.early_stop_patience}, but the run has no validation images to stop "
            "on: hold some out with LoadDataset's validation fraction, connect a validation_dataset to "
            "CacheLatents, or set early_stop_patience to 0."
        )


def check_masks(masked, unmasked, mask_min):
    """`masked`: (image, mean of its mask in [0, 1]) of every image with a mask, beside `unmasked`
    images weighing 1. A mask set under which less than MIN_TRAINED_SHARE of the loss weight is left
    is an error naming the images. (A single black mask is LoadDataset's warning.)"""
    if not masked:
        return
    weights = [mask_min + (1 - mask_min) * coverage for _, coverage in masked] + [1.0] * unmasked
    if sum(weights) / len(weights) < MIN_TRAINED_SHARE:
        names = ", ".join(os.path.basename(image) for image, _ in masked[:5]) + (", …" if len(masked) > 5 else "")
        raise EriDiffusionError(
            f"the masks of {len(masked)} images ({names}) leave {100 * sum(weights) / len(weights):.2g}% of their "
            "pixels to train on: black means ignore. Paint what the LoRA should learn white in masks/, or raise "
            "TrainingExtras' mask_min."
        )


def masks_of_records(dataset):
    """check_masks' `masked` of a Dataset, from the masks' coverage read when it was loaded."""
    masked = [(record.path, record.mask_coverage) for record in dataset.records if record.mask]
    return masked, len(dataset.records) - len(masked)


def check_resume_point(point, config, world_size):
    """A resume point that the run cannot continue: other settings, or a step at or past `steps`."""
    if point is None or point.state is None:
        return
    check_resumable(point.state, config, world_size, point.path)
    if "shards" in point.state["optimizer"] and not os.path.isdir(shards_path(point.path)):
        raise EriDiffusionError(
            f"{shards_path(point.path)} is missing: the optimizer's state of a sharded run (sharding fsdp) is that "
            "folder beside its checkpoint. Copy it back into the checkpoints folder, or start a new run."
        )
    if point.state["step"] >= config.steps:
        raise EriDiffusionError(
            f"{point.path} is at step {point.state['step']}, and steps is {config.steps}: raise steps to train on."
        )


def check_block_multipliers(multipliers, block_lr):
    """block_lr's {layer: multiplier} that sets every layer's rate to 0 trains nothing."""
    if multipliers and not any(multipliers.values()):
        raise EriDiffusionError(
            f"block_lr '{block_lr}' sets the learning rate of every adapted block to 0, so nothing would train; "
            "give some block a multiplier above 0, or clear block_lr."
        )


# In the order a user meets them: the settings alone, the data and inputs, the settings against the data, the
# resume point against the model and data, the models, what they read, the adapters, the device, its memory.
SETTINGS_CHECKS = (check_processes, check_resume_settings, check_sharded_run)
CHECKS = SETTINGS_CHECKS + (
    check_data_and_inputs,
    check_data_fits_settings,
    check_resume_fits_run,
    check_models,
    check_weights_train,
    check_sharded_inputs_fit,
    check_models_read_data,
    check_adapters_attach,
    check_device_runs,
    check_memory_plan,
)
