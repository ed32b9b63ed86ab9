"""ai-toolkit's `train` and `sample` sections in EriDiffusion's `train`, `objective` and `sample`."""

import re

from ...errors import EriDiffusionError
from ...training.run.optimizers import OPTIMIZERS
from ...training.samples.prompts import FLAGS
from ..schema import section_settings
from .translation import DTYPES, TIMESTEP_TYPES, label

TRAIN_KEYS = (
    "batch_size",
    "steps",
    "gradient_accumulation",
    "gradient_accumulation_steps",
    "train_unet",
    "train_text_encoder",
    "text_encoder_lr",
    "lr",
    "unet_lr",
    "gradient_checkpointing",
    "noise_scheduler",
    "optimizer",
    "optimizer_params",
    "lr_scheduler",
    "lr_scheduler_params",
    "lr_warmup_steps",
    "dtype",
    "linear_timesteps",
    "linear_timesteps2",
    "timestep_type",
    "min_denoising_steps",
    "max_denoising_steps",
    "bypass_guidance_embedding",
    "noise_offset",
    "min_snr_gamma",
    "snr_gamma",
    "skip_first_sample",
    "force_first_sample",
    "disable_sampling",
    "ema_config",
    "max_grad_norm",
    "content_or_style",
    "unload_text_encoder",
    "cache_text_embeddings",
    "weight_jitter",
    "loss_type",
    "xformers",
    "sdp",
    "do_cfg",
    "diff_output_preservation",
    "diff_output_preservation_multiplier",
    "diff_output_preservation_class",
    "switch_boundary_every",
    "audio_loss_multiplier",
)


# ai-toolkit's loss_type values EriDiffusion has (objective.loss): "mae" is its name for L1.
LOSS_TYPES = {"mse": "mse", "mae": "l1", "l1": "l1", "huber": "huber", "smooth_l1": "smooth_l1"}


def train_section(t, train, at):
    train = t.mapping(train, at, TRAIN_KEYS)
    for key, ours in (
        ("batch_size", "batch_size"),
        ("steps", "steps"),
        ("gradient_checkpointing", "gradient_checkpointing"),
    ):
        if key in train:
            t.put("train", ours, train[key], at + (key,))
    accumulations = [k for k in ("gradient_accumulation", "gradient_accumulation_steps") if train.get(k, 1) != 1]
    if len(accumulations) > 1:
        raise EriDiffusionError(
            f"{t.text.origin(at)}: {label(at)}: give gradient_accumulation or gradient_accumulation_steps, not both."
        )
    for key in accumulations:
        t.put("train", "grad_accum", train[key], at + (key,))
    rate_key = "unet_lr" if "unet_lr" in train else "lr"
    if rate_key in train:
        t.put("train", "learning_rate", train[rate_key], at + (rate_key,))
    if train.get("train_text_encoder"):  # at ai-toolkit's default: the learning rate
        te_key = "text_encoder_lr" if "text_encoder_lr" in train else rate_key
        if te_key in train:
            t.put("train", "text_encoder_lr", train[te_key], at + (te_key,))
        else:
            t.put(
                "train",
                "text_encoder_lr",
                section_settings("train")["learning_rate"].default,
                at + ("train_text_encoder",),
            )
    if train.get("train_unet", True) is False:  # the text encoders alone train
        t.put("train", "train_diffusion_model", False, at + ("train_unet",))
    _train_optimizer(t, train, at)
    if "dtype" in train:
        t.put("train", "dtype", t.choice(train["dtype"], DTYPES, at + ("dtype",)), at + ("dtype",))
    _train_objective(t, train, at)
    _train_ema(t, train.get("ema_config"), at + ("ema_config",))
    _train_preservation(t, train, at)
    _train_unsupported(t, train, at)


def _train_optimizer(t, train, at):
    """The optimizer, its schedule, warmup, clipping and weight decay."""
    if "optimizer" in train:  # adamw8bit, AdamW_8bit, paged_adamw8bit ... are ours without case and "_"
        names = {name.lower(): name for name in OPTIMIZERS}
        written = str(train["optimizer"]).replace("_", "").replace("-", "")
        t.put("train", "optimizer", t.choice(written, names, at + ("optimizer",)), at + ("optimizer",))
    if "lr_scheduler" in train:
        schedules = {"constant": "constant", "constant_with_warmup": "constant", "cosine": "cosine"}
        t.put(
            "train",
            "lr_schedule",
            t.choice(train["lr_scheduler"], schedules, at + ("lr_scheduler",)),
            at + ("lr_scheduler",),
        )
    if "lr_warmup_steps" in train:
        t.put("train", "warmup_steps", train["lr_warmup_steps"], at + ("lr_warmup_steps",))
    if "max_grad_norm" in train:
        t.put("train", "max_grad_norm", train["max_grad_norm"], at + ("max_grad_norm",))
    params = train.get("optimizer_params")
    if isinstance(params, dict):
        if "weight_decay" in params:
            t.put("train", "weight_decay", params["weight_decay"], at + ("optimizer_params", "weight_decay"))
        for key in params:
            if key != "weight_decay":
                t.skip(
                    at + ("optimizer_params", key), "the optimizers take their library's defaults beside weight_decay"
                )
    elif params is not None:
        raise EriDiffusionError(
            f"{t.text.origin(at + ('optimizer_params',))}: {label(at + ('optimizer_params',))} "
            f"must be a mapping (got {params!r})."
        )


def _train_preservation(t, train, at):
    """diff_output_preservation (+ _class, _multiplier): the class phrase whose prediction the adapter must
    leave as the model had it. ai-toolkit puts the class in place of the trigger word in each caption; here
    the class is the preservation prompt itself."""
    if not train.get("diff_output_preservation"):
        return
    phrase = train.get("diff_output_preservation_class")
    if not isinstance(phrase, str) or not phrase.strip():
        raise EriDiffusionError(
            f"{t.text.origin(at)}: {label(at + ('diff_output_preservation',))} needs "
            f"{label(at + ('diff_output_preservation_class',))}, the class without the trigger word (e.g. person)."
        )
    t.put("train", "preservation_prompt", phrase.strip(), at + ("diff_output_preservation_class",))
    if "diff_output_preservation_multiplier" in train:
        key = at + ("diff_output_preservation_multiplier",)
        t.put("train", "preservation_weight", train["diff_output_preservation_multiplier"], key)


def _train_ema(t, ema, at):
    """ema_config {use_ema, ema_decay}: ai-toolkit's EMA of the trained weights (its decay 0.999 by default)."""
    if ema is None:
        return
    ema = t.mapping(ema, at, ("use_ema", "ema_decay"))
    if ema.get("use_ema"):
        t.put(
            "train", "ema_decay", ema.get("ema_decay", 0.999), at + ("ema_decay" if "ema_decay" in ema else "use_ema",)
        )


def _train_objective(t, train, at):
    if "timestep_type" in train:
        kind = str(train["timestep_type"]).lower()
        if kind in TIMESTEP_TYPES:
            t.put("objective", "timestep_sampling", TIMESTEP_TYPES[kind], at + ("timestep_type",))
        else:
            t.skip(
                at + ("timestep_type",),
                f"'{kind}' is not one of EriDiffusion's samplings; the family's default "
                "is used (see objective.timestep_sampling)",
            )
    for key in ("bypass_guidance_embedding", "noise_offset"):
        if key in train:
            t.put("objective", key, train[key], at + (key,))
    # ai-toolkit's timestep range is in steps of its 1000-step schedule
    for key, ours in (("min_denoising_steps", "timestep_min"), ("max_denoising_steps", "timestep_max")):
        if key in train:
            value = train[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise EriDiffusionError(f"{t.text.origin(at + (key,))}: {label(at + (key,))} must be a number 0..1000.")
            t.put("objective", ours, value / 1000, at + (key,))
    if "loss_type" in train:
        kind = str(train["loss_type"]).lower()
        if kind in LOSS_TYPES:
            t.put("objective", "loss", LOSS_TYPES[kind], at + ("loss_type",))
        else:
            t.skip(
                at + ("loss_type",),
                f"'{kind}' is not one of EriDiffusion's losses ({', '.join(sorted(LOSS_TYPES))}); mse is used",
            )
    if "audio_loss_multiplier" in train:  # LTX-2 with its audio (model.audio_vae): the audio stream's weight
        t.put("objective", "audio_loss_weight", train["audio_loss_multiplier"], at + ("audio_loss_multiplier",))
    if "switch_boundary_every" in train:  # Wan 2.2 14B's two experts (model.low_noise_model) take turns
        t.put("objective", "switch_boundary_every", train["switch_boundary_every"], at + ("switch_boundary_every",))
    for key in ("min_snr_gamma", "snr_gamma"):
        if train.get(key):
            t.put("objective", "loss_weighting", "min_snr", at + (key,))
            t.put("objective", "min_snr_gamma", train[key], at + (key,))


def _train_unsupported(t, train, at):
    accepted = {
        "linear_timesteps": False,
        "linear_timesteps2": False,
        "skip_first_sample": True,
        "force_first_sample": False,
        "content_or_style": "balanced",
        "unload_text_encoder": False,
        "cache_text_embeddings": True,
        "weight_jitter": 0.0,
        "do_cfg": False,
    }
    reasons = {
        "skip_first_sample": "EriDiffusion samples after training steps only",
        "cache_text_embeddings": "captions are always cached",
    }
    for key, value in accepted.items():
        if key in train:
            t.unless(train[key], value, at + (key,), reasons.get(key, "not supported yet"))
    why = {
        "noise_scheduler": "the model's own noise schedule (ComfyUI's model_sampling) is used",
        "lr_scheduler_params": "not supported yet",
        "xformers": "ComfyUI picks the attention",
        "sdp": "ComfyUI picks the attention",
    }
    for key, reason in why.items():
        if key in train:
            t.skip(at + (key,), reason)


SAMPLE_KEYS = (
    "sampler",
    "sample_every",
    "width",
    "height",
    "prompts",
    "samples",
    "neg",
    "seed",
    "walk_seed",
    "guidance_scale",
    "sample_steps",
    "num_frames",
    "fps",
    "sample_start_step",
    "network_multiplier",
    "guidance_rescale",
    "format",
    "refiner_start_at",
    "adapter_conditioning_scale",
    "extra_values",
)


# ai-toolkit's per-sample keys (samples[]) -> the prompt-line flag that sets each
SAMPLE_ITEM_FLAGS = {
    "width": "--w",
    "height": "--h",
    "neg": "--n",
    "seed": "--seed",
    "sample_steps": "--steps",
    "ctrl_img": "--ref",
    "ctrl_img_1": "--ref",
    "ctrl_img_2": "--ref",
    "ctrl_img_3": "--ref",
}
SAMPLE_ITEM_KEYS = ("prompt", "guidance_scale", "num_frames", "fps", "ctrl_idx", "network_multiplier") + tuple(
    SAMPLE_ITEM_FLAGS
)


def sample_section(t, sample, at, trigger, distilled):
    sample = t.mapping(sample, at, SAMPLE_KEYS)
    t.sections["sample"] = {}
    renamed = {
        "sample_every": "every",
        "width": "width",
        "height": "height",
        "seed": "seed",
        "guidance_scale": "cfg",
        "sample_steps": "steps",
        "num_frames": "frames",
    }
    for key, ours in renamed.items():
        if key in sample:
            t.put("sample", ours, sample[key], at + (key,))
    if distilled and "guidance_scale" in sample:
        # for Flux dev ai-toolkit feeds guidance_scale to the guidance embedding: each prompt's --g;
        # CFG stays off
        t.put("sample", "cfg", 1.0, at + ("guidance_scale",))
    lines = _prompt_lines(t, sample, at, distilled)
    if lines is not None:
        where = at + ("samples" if "samples" in sample else "prompts",)
        # ai-toolkit writes [trigger] where the trigger word goes
        t.put("sample", "prompts", [line.replace("[trigger]", trigger) for line in lines], where)
    _sample_unsupported(t, sample, at)


def _prompt_lines(t, sample, at, distilled):
    """The prompt lines of `prompts` or `samples[]`, each with the flags of its own settings and of
    the section's that a line carries (neg, the seed when walk_seed is off, Flux dev's guidance)."""
    if "samples" in sample:
        items = sample["samples"]
        if not isinstance(items, list) or not all(isinstance(i, dict) and i.get("prompt") for i in items):
            raise EriDiffusionError(
                f"{t.text.origin(at)}: {label(at + ('samples',))} must be a list of mappings, each with a prompt."
            )
        items = [t.mapping(item, at + ("samples", k), SAMPLE_ITEM_KEYS) for k, item in enumerate(items)]
    elif "prompts" in sample:
        prompts = sample["prompts"]
        prompts = [prompts] if isinstance(prompts, str) else prompts
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise EriDiffusionError(f"{t.text.origin(at)}: {label(at + ('prompts',))} must be a list of prompts.")
        items = [{"prompt": p} for p in prompts]
    else:
        return None
    shared = {}
    if sample.get("neg"):
        shared["neg"] = sample["neg"]
    if sample.get("walk_seed") is False:
        shared["seed"] = sample.get("seed", 0)  # every prompt the same seed
    if distilled and "guidance_scale" in sample:
        shared["guidance_scale"] = sample["guidance_scale"]
    return [_prompt_line(t, {**shared, **item}, at + ("samples", k), distilled) for k, item in enumerate(items)]


def _prompt_line(t, item, at, distilled):
    """`prompt --flag value ...` of one ai-toolkit sample item; a setting the prompt already sets
    with its own flag (ai-toolkit reads them too) keeps that value."""
    line = str(item["prompt"]).strip()
    if "\n" in line or "\r" in line:
        raise EriDiffusionError(
            f"{t.text.origin(at)}: {label(at + ('prompt',))} holds a line break; write the prompt on one line."
        )
    inline = {FLAGS.get(flag.lower()) for flag in re.findall(r"(?:^|\s)--([A-Za-z]+)(?=\s|$)", line)}
    flags = {**SAMPLE_ITEM_FLAGS, "guidance_scale": "--g" if distilled else "--cfg"}
    for key, flag in flags.items():
        if item.get(key) not in (None, "") and (FLAGS[flag[2:]] not in inline or FLAGS[flag[2:]] == "references"):
            value = str(item[key]).strip()
            if re.search(r"(?:^|\s)--\S|[\r\n]", value):  # it would end the flag's value and start another
                raise EriDiffusionError(
                    f"{t.text.origin(at)}: {label(at + (key,))} is {value!r}, which holds a line break or a --flag; "
                    "give the value alone (flags go in the prompt)."
                )
            line += f" {flag} {value}"
    for key, reason in (
        ("num_frames", "every sample renders the sample section's frames"),
        ("fps", "video samples play at 16 fps"),
        ("ctrl_idx", "references are read in ctrl_img_1..3 order"),
    ):
        if key in item:
            t.skip(at + (key,), reason)
    if "network_multiplier" in item:
        t.unless(item["network_multiplier"], 1, at + ("network_multiplier",), "samples use the adapter at strength 1")
    return line


def _sample_unsupported(t, sample, at):
    accepted = {"sample_start_step": 0, "network_multiplier": 1, "guidance_rescale": 0.0}
    for key, value in accepted.items():
        if key in sample:
            t.unless(sample[key], value, at + (key,), "not supported yet")
    for key, reason in (
        ("sampler", "ComfyUI's sampler_name and scheduler are used (euler, normal)"),
        ("fps", "video samples play at 16 fps"),
        ("format", "samples are PNG (video: WebP)"),
        ("refiner_start_at", "not supported"),
        ("adapter_conditioning_scale", "not supported"),
        ("extra_values", "not supported"),
    ):
        if key in sample:
            t.skip(at + (key,), reason)
