"""What can be told wrong about a run before it makes its folder, loads a model or encodes an image:
settings that contradict the data, masks that leave nothing to learn, a resume point the run cannot
continue. LoRATrainer, the command line's `train` and its `--dry-run` ask the same checks, so a
mistake is named the same way wherever it is made."""

import os

from ...errors import EriDiffusionError
from ..model.inputs import check_takes_start_image
from ..samples.inputs import reads_condition, takes_inpaint_channels
from .run_state import check_resumable

# Below this share of the loss weight (masked pixels at their mask's value, the rest at mask_min)
# over all the images, a run trains on almost nothing.
MIN_TRAINED_SHARE = 0.01


def check_run(data, config, clip, resume, processes):
    """Every check of a run of TrainConfig `config` on TrainingData `data` (with `clip` and the
    ResumePoint `resume`, or None, on `processes`) that needs no model moved and no folder made."""
    if not data.samples:
        raise EriDiffusionError("TRAINING_DATA holds no samples; check the LoadDataset folder.")
    if config.text_encoder_lr > 0 and clip is None:
        raise EriDiffusionError(
            "text_encoder_lr > 0 trains the text encoder: connect the graph's CLIP to "
            "LoRATrainer's clip input (or set text_encoder_lr to 0)."
        )
    if config.text_encoder_lr > 0 and any(sample.picture_prompt for sample in data.samples):
        raise EriDiffusionError(
            "text_encoder_lr > 0 trains the text encoder, but these captions are encoded shown their reference "
            "images (Qwen-Image-Edit), which a trained text encoder does not re-encode; set text_encoder_lr to 0."
        )
    if processes.distributed and config.device != "auto":
        raise EriDiffusionError(
            f"device {config.device}: a run of {processes.world_size} processes trains each on its own GPU "
            "(torchrun's LOCAL_RANK); set device to auto."
        )
    if config.preservation_prompt.strip() and clip is None:
        raise EriDiffusionError(
            "preservation_prompt needs the text encoder to encode the class phrase: connect the graph's "
            "CLIP to LoRATrainer's clip input (or clear preservation_prompt)."
        )
    check_settings_fit_data(config, data.validation is not None, data.regularization is not None)
    check_masks(*masks_of_samples(data), config.mask_min)
    check_resume_point(resume, config, processes.world_size)


def check_model_fits(model, data, sample_settings=None):
    """What the loaded `model` (a BaseModel) cannot do with TrainingData `data` and SampleSettings
    `sample_settings`: an input layout ComfyUI's class cannot fill, inpaint data, edit references, start images or
    sound it would not read, a sample prompt setting it ignores. Before the run's folder is made."""
    check_flux_input_layout(model)
    check_inpaint_fits(model, any(sample.inpaint is not None for sample in data.samples))
    check_references_read(model, any(sample.reference_latents for sample in data.samples))
    check_takes_start_image(model, data)
    check_audio_read(
        model,
        any(sample.audio_latent is not None for sample in data.samples),
        sample_settings is not None and sample_settings.audio_vae is not None,
    )
    check_samples_read(model, sample_settings)


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


def masks_of_samples(data):
    """check_masks' `masked` of TrainingData `data`: each masked sample's mean mask on its latent grid."""
    masked = [(sample.source, float(sample.mask.float().mean())) for sample in data.samples if sample.mask is not None]
    return masked, len(data.samples) - len(masked)


def masks_of_records(dataset):
    """check_masks' `masked` of a Dataset, from the masks' coverage read when it was loaded."""
    masked = [(record.path, record.mask_coverage) for record in dataset.records if record.mask]
    return masked, len(dataset.records) - len(masked)


def check_resume_point(point, config, world_size):
    """A resume point that the run cannot continue: other settings, or a step at or past `steps`."""
    if point is None or point.state is None:
        return
    check_resumable(point.state, config, world_size, point.path)
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
