"""ai-toolkit's config format (`job: extension`, `config.process[0]` with network, save, datasets,
train, model, sample) turned into EriDiffusion's sections. Keys EriDiffusion reads but cannot honour
yet are collected, to be listed in one warning; keys ai-toolkit does not have are errors."""

from dataclasses import dataclass, field

from ..errors import EriDiffusionError
from ..training.run.optimizers import OPTIMIZERS
from .schema import nearest_hint, section_settings

TRAINER_TYPES = ("sd_trainer", "ui_trainer", "diffusion_trainer")
ALGORITHMS = {"lora": "lora", "locon": "lora", "dora": "dora", "lokr": "lokr", "loha": "loha"}
DTYPES = {
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float32": "fp32",
    "fp32": "fp32",
    "float": "fp32",
}
TIMESTEP_TYPES = {"linear": "uniform", "sigmoid": "sigmoid", "flux_shift": "shift"}
ARCH_FLAGS = {
    "is_v2": "sd2",
    "is_xl": "sdxl",
    "is_v3": "sd3",
    "is_flux": "flux",
    "is_pixart": "pixart",
    "is_pixart_sigma": "pixart_sigma",
    "is_auraflow": "auraflow",
    "is_lumina2": "lumina2",
    "is_ssd": "ssd",
    "is_vega": "vega",
}
# ai-toolkit's archs whose guidance_scale is the guidance embedding's value, not CFG.
GUIDANCE_DISTILLED = ("flux", "flux_kontext")
# EriDiffusion's own model keys, accepted in ai-toolkit's model section too (for separate files).
OWN_MODEL_KEYS = ("checkpoint", "diffusion_model", "weight_dtype", "text_encoders", "clip_type", "vae")
TINY_NAMES = ("tiny-sdxl", "tiny-sd15")


def is_ai_toolkit(values):
    return "job" in values or "config" in values


def label(key_path):
    """config.process[0].train.lr for ("config", "process", 0, "train", "lr")."""
    text = ""
    for key in key_path:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else str(key))
    return text


@dataclass
class Translation:
    """EriDiffusion sections from an ai-toolkit file; `labels` names, per (section, key), the
    ai-toolkit key it came from and that key's file."""

    text: object
    sections: dict = field(
        default_factory=lambda: {"model": {}, "dataset": {}, "cache": {}, "train": {}, "save": {}, "logging": {}}
    )
    labels: dict = field(default_factory=dict)
    unsupported: list = field(default_factory=list)
    output: tuple = ()  # (folder, its file) from training_folder

    def put(self, section, key, value, at):
        if self.sections.get(section) is None:
            self.sections[section] = {}
        self.sections[section][key] = value
        self.labels[(section, key)] = (label(at), self.text.origin(at))

    def skip(self, at, why):
        self.unsupported.append(f"{label(at)} ({why})")

    def unless(self, value, accepted, at, why):
        """A key whose only honoured value is `accepted`: anything else is listed as unsupported."""
        if value != accepted:
            self.skip(at, why)

    def mapping(self, value, at, known):
        if not isinstance(value, dict):
            raise EriDiffusionError(f"{self.text.origin(at)}: {label(at)} must be a mapping of keys (got {value!r}).")
        for key in value:
            if key not in known:
                raise EriDiffusionError(
                    f"{self.text.origin(at + (key,))}: unknown key {label(at + (key,))}{nearest_hint(str(key), known)}"
                )
        return value

    def choice(self, value, table, at):
        name = str(value).strip().lower()
        if name not in table:
            raise EriDiffusionError(
                f"{self.text.origin(at)}: {label(at)} is {value!r}; EriDiffusion takes "
                f"{', '.join(sorted(set(table)))}{nearest_hint(name, table)}."
            )
        return table[name]


def translate(text):
    """The Translation of ai-toolkit config `text` (a ConfigText)."""
    t = Translation(text)
    top = t.mapping(text.values, (), ("job", "config", "meta"))
    if top.get("job", "extension") not in ("extension", "train"):
        raise EriDiffusionError(f"{text.path}: job is {top['job']!r}; only training jobs (job: extension) run here.")
    if "meta" in top:
        t.skip(("meta",), "ai-toolkit writes it into its saved files; EriDiffusion's metadata is its own")
    config = t.mapping(top.get("config", {}), ("config",), ("name", "process"))
    processes = config.get("process")
    if not isinstance(processes, list) or len(processes) != 1:
        raise EriDiffusionError(
            f"{text.path}: config.process must be a list with one training process "
            f"(got {len(processes) if isinstance(processes, list) else processes!r})."
        )
    at = ("config", "process", 0)
    if "name" in config:
        t.put("train", "run_name", str(config["name"]), ("config", "name"))
        t.put("save", "filename_prefix", str(config["name"]), ("config", "name"))
    _process(t, processes[0], at)
    return t


PROCESS_KEYS = (
    "type",
    "training_folder",
    "device",
    "trigger_word",
    "performance_log_every",
    "sqlite_db_path",
    "network",
    "save",
    "datasets",
    "train",
    "model",
    "sample",
    "logging",
)


def _process(t, process, at):
    process = t.mapping(process, at, PROCESS_KEYS)
    if process.get("type", "sd_trainer") not in TRAINER_TYPES:
        raise EriDiffusionError(
            f"{t.text.origin(at)}: {label(at + ('type',))} is {process['type']!r}; only "
            f"training processes ({', '.join(TRAINER_TYPES)}) run here."
        )
    if "training_folder" in process:
        t.output = (process["training_folder"], t.text.origin(at + ("training_folder",)))
    if "device" in process:
        t.skip(at + ("device",), "the run uses ComfyUI's device; choosing one comes with multi-GPU support")
    for key in ("performance_log_every", "sqlite_db_path"):
        if key in process:
            t.skip(at + (key,), "ai-toolkit's own logging")
    trigger = process.get("trigger_word")
    if trigger:
        t.put("dataset", "trigger_word", trigger, at + ("trigger_word",))
    if "network" in process:
        _network(t, process["network"], at + ("network",))
    if "save" in process:
        _save(t, process["save"], at + ("save",))
    datasets = process.get("datasets", [])
    regularization = (
        [isinstance(d, dict) and d.get("is_reg") is True for d in datasets] if isinstance(datasets, list) else []
    )
    if not isinstance(datasets, list) or regularization.count(False) != 1 or regularization.count(True) > 1:
        raise EriDiffusionError(
            f"{t.text.origin(at)}: {label(at + ('datasets',))} must list one dataset, and at most one more "
            "with is_reg: true (class images); EriDiffusion trains on one folder per run."
        )
    for index, dataset in enumerate(datasets):
        section = "regularization_dataset" if regularization[index] else "dataset"
        _dataset(t, dataset, at + ("datasets", index), section)
    train = process.get("train", {})
    _train(t, train, at + ("train",))
    if "model" in process:
        _model(t, process["model"], at + ("model",))
    disabled = isinstance(train, dict) and train.get("disable_sampling") is True
    model = process.get("model") if isinstance(process.get("model"), dict) else {}
    distilled = model.get("is_flux") is True or str(model.get("arch", "")).lower() in GUIDANCE_DISTILLED
    if "sample" in process and not disabled:
        _sample(t, process["sample"], at + ("sample",), trigger or "", distilled)
    if "logging" in process:
        _logging(t, process["logging"], at + ("logging",))


def _network(t, network, at):
    network = t.mapping(
        network,
        at,
        (
            "type",
            "linear",
            "rank",
            "linear_alpha",
            "alpha",
            "conv",
            "conv_alpha",
            "lokr_factor",
            "lokr_full_rank",
            "dropout",
            "network_kwargs",
            "transformer_only",
            "lorm",
            "split_multistage_loras",
        ),
    )
    if "type" in network:
        t.put("train", "algorithm", t.choice(network["type"], ALGORITHMS, at + ("type",)), at + ("type",))
    for key in ("linear", "rank"):
        if key in network:
            t.put("train", "rank", network[key], at + (key,))
    # ai-toolkit's defaults: linear_alpha is alpha (1.0 when not given), conv_alpha is conv
    alpha_key = "linear_alpha" if "linear_alpha" in network else "alpha"
    if alpha_key in network:
        t.put("train", "alpha", network[alpha_key], at + (alpha_key,))
    elif "linear" in network or "rank" in network:
        t.put("train", "alpha", 1.0, at + ("alpha",))
    if network.get("conv"):
        t.put("train", "conv_rank", network["conv"], at + ("conv",))
        alpha_key = "conv_alpha" if "conv_alpha" in network else "conv"
        t.put("train", "conv_alpha", network[alpha_key], at + (alpha_key,))
    for key in ("lokr_factor", "lokr_full_rank"):
        if key in network:
            t.put("train", key, network[key], at + (key,))
    for key in ("dropout", "network_kwargs", "lorm"):
        if network.get(key):
            t.skip(at + (key,), "not supported by EriDiffusion's adapters")
    if "transformer_only" in network:
        t.unless(
            network["transformer_only"],
            True,
            at + ("transformer_only",),
            "EriDiffusion adapts the transformer only; see train.targets",
        )
    if "split_multistage_loras" in network:
        t.skip(at + ("split_multistage_loras",), "multi-stage models are not supported")


def _save(t, save, at):
    save = t.mapping(
        save,
        at,
        ("dtype", "save_every", "max_step_saves_to_keep", "save_format", "push_to_hub", "hf_repo_id", "hf_private"),
    )
    if "dtype" in save:
        t.put("save", "dtype", t.choice(save["dtype"], DTYPES, at + ("dtype",)), at + ("dtype",))
    if "save_every" in save:
        t.put("train", "save_every", save["save_every"], at + ("save_every",))
    if "max_step_saves_to_keep" in save:
        t.put("train", "keep_last", save["max_step_saves_to_keep"], at + ("max_step_saves_to_keep",))
    if "save_format" in save:
        t.unless(save["save_format"], "safetensors", at + ("save_format",), "files are ComfyUI safetensors LoRAs")
    if "push_to_hub" in save:
        t.unless(save["push_to_hub"], False, at + ("push_to_hub",), "EriDiffusion does not upload")
    for key in ("hf_repo_id", "hf_private"):
        if key in save:
            t.skip(at + (key,), "EriDiffusion does not upload")


# ai-toolkit's dataset keys EriDiffusion has no counterpart for, with the value that means "off".
DATASET_DEFAULTS = {
    "default_caption": None,
    "token_dropout_rate": 0.0,
    "control_path": None,
    "mask_path": None,
    "flip_y": False,
    "random_crop": False,
    "random_scale": False,
    "scale": 1.0,
    "bucket_tolerance": 64,
    "network_weight": 1.0,
    "alpha_mask": False,
    "shrink_video_to_frames": True,
    "do_i2v": False,
}
DATASET_KEYS = (
    "folder_path",
    "caption_ext",
    "caption_dropout_rate",
    "shuffle_tokens",
    "keep_tokens",
    "num_repeats",
    "resolution",
    "cache_latents_to_disk",
    "cache_latents",
    "num_frames",
    "fps",
    "buckets",
    "flip_x",
    "is_reg",
    *DATASET_DEFAULTS,
)


def _dataset(t, dataset, at, section="dataset"):
    """One entry of datasets: LoadDataset's inputs in `section` (dataset, or regularization_dataset for
    ai-toolkit's is_reg class images, which train at the first dataset's resolution)."""
    dataset = t.mapping(dataset, at, DATASET_KEYS)
    renamed = {
        "folder_path": "folder",
        "caption_dropout_rate": "caption_dropout",
        "shuffle_tokens": "shuffle_tags",
        "keep_tokens": "keep_tags",
        "num_repeats": "repeats",
        "num_frames": "frames",
        "fps": "fps",
    }
    for key, ours in renamed.items():
        if key in dataset:
            t.put(section, ours, dataset[key], at + (key,))
    if "caption_ext" in dataset:
        ext = str(dataset["caption_ext"])
        t.put(section, "caption_ext", ext if ext.startswith(".") else "." + ext, at + ("caption_ext",))
    if "resolution" in dataset and section != "dataset":
        t.skip(at + ("resolution",), "class images train at the resolution of the first dataset")
    elif "resolution" in dataset:
        sizes = dataset["resolution"] if isinstance(dataset["resolution"], list) else [dataset["resolution"]]
        if not sizes or not all(isinstance(s, int) and not isinstance(s, bool) for s in sizes):
            raise EriDiffusionError(
                f"{t.text.origin(at)}: {label(at + ('resolution',))} must be a whole number "
                f"or a list of them (got {dataset['resolution']!r})."
            )
        t.put("cache", "resolution", max(sizes), at + ("resolution",))
        if len(sizes) > 1:
            t.skip(at + ("resolution",), f"multi-resolution: trains at {max(sizes)} only")
    if "flip_x" in dataset:
        t.put(section, "flip", dataset["flip_x"], at + ("flip_x",))
    for key in ("cache_latents_to_disk", "cache_latents", "buckets"):
        if key in dataset:
            t.unless(dataset[key], True, at + (key,), "latents are always cached on disk, in aspect-ratio buckets")
    for key, value in DATASET_DEFAULTS.items():
        if key in dataset:
            t.unless(
                dataset[key],
                value,
                at + (key,),
                "edit pairs read a control/ folder beside the images" if key == "control_path" else "not supported yet",
            )


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
)


def _train(t, train, at):
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
    if "dtype" in train:
        t.put("train", "dtype", t.choice(train["dtype"], DTYPES, at + ("dtype",)), at + ("dtype",))
    _train_objective(t, train, at)
    _train_ema(t, train.get("ema_config"), at + ("ema_config",))
    _train_preservation(t, train, at)
    _train_unsupported(t, train, at)


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
    for key in ("min_snr_gamma", "snr_gamma"):
        if train.get(key):
            t.put("objective", "loss_weighting", "min_snr", at + (key,))
            t.put("objective", "min_snr_gamma", train[key], at + (key,))


def _train_unsupported(t, train, at):
    accepted = {
        "train_unet": True,
        "linear_timesteps": False,
        "linear_timesteps2": False,
        "skip_first_sample": True,
        "force_first_sample": False,
        "content_or_style": "balanced",
        "unload_text_encoder": False,
        "cache_text_embeddings": True,
        "weight_jitter": 0.0,
        "loss_type": "mse",
        "do_cfg": False,
    }
    reasons = {
        "skip_first_sample": "EriDiffusion samples after training steps only",
        "cache_text_embeddings": "captions are always cached",
        "train_unet": "the diffusion model is always trained",
    }
    for key, value in accepted.items():
        if key in train:
            t.unless(train[key], value, at + (key,), reasons.get(key, "not supported yet"))
    why = {
        "noise_scheduler": "the model's own noise schedule (ComfyUI's model_sampling) is used",
        "lr_scheduler_params": "not supported yet",
        "xformers": "ComfyUI picks the attention",
        "sdp": "ComfyUI picks the attention",
        "switch_boundary_every": "not supported yet",
    }
    for key, reason in why.items():
        if key in train:
            t.skip(at + (key,), reason)


MODEL_KEYS = (
    "name_or_path",
    "arch",
    "quantize",
    "qtype",
    "quantize_te",
    "qtype_te",
    "low_vram",
    "dtype",
    "vae_path",
    "lora_path",
    "assistant_lora_path",
    "inference_lora_path",
    "te_name_or_path",
    "model_kwargs",
    "text_encoder_bits",
    "attn_masking",
    "split_model_over_gpus",
    "is_v_pred",
    *ARCH_FLAGS,
    *OWN_MODEL_KEYS,
)


def _model(t, model, at):
    model = t.mapping(model, at, MODEL_KEYS)
    for key in OWN_MODEL_KEYS:
        if key in model:
            t.put("model", key, model[key], at + (key,))
    if "name_or_path" in model:
        name = str(model["name_or_path"])
        if name not in TINY_NAMES and not name.endswith((".safetensors", ".sft", ".ckpt")):
            raise EriDiffusionError(
                f"{t.text.origin(at)}: {label(at + ('name_or_path',))} is {name!r}; EriDiffusion loads ComfyUI's "
                "single-file checkpoints (.safetensors), not Hugging Face repositories or diffusers folders. Give "
                "the checkpoint file, or diffusion_model + text_encoders + clip_type + vae (files ComfyUI's "
                "loaders take) in this model section, or tiny-sdxl to try the config."
            )
        t.put("model", "checkpoint", name, at + ("name_or_path",))
    if "vae_path" in model:
        t.put("model", "vae", model["vae_path"], at + ("vae_path",))
    flags = [k for k in ARCH_FLAGS if model.get(k)]
    for key in flags:
        t.put("model", "arch", ARCH_FLAGS[key], at + (key,))
    if "arch" in model:
        t.put("model", "arch", str(model["arch"]), at + ("arch",))
    if model.get("quantize"):
        t.put("model", "weight_dtype", "fp8_e4m3fn", at + ("quantize",))
        t.unless(model.get("qtype", "qfloat8"), "qfloat8", at + ("qtype",), "fp8 (e4m3fn) weights are used")
    accepted = {
        "quantize_te": False,
        "low_vram": False,
        "lora_path": None,
        "assistant_lora_path": None,
        "inference_lora_path": None,
        "te_name_or_path": None,
        "model_kwargs": {},
        "text_encoder_bits": 16,
        "attn_masking": False,
        "split_model_over_gpus": False,
        "is_v_pred": False,
        "qtype_te": "qfloat8",
    }
    reasons = {
        "low_vram": "see train.weights_vram_gib",
        "quantize_te": "text encoders load as ComfyUI loads them",
        "te_name_or_path": "give model.text_encoders files",
        "is_v_pred": "ComfyUI detects the prediction type from the file",
    }
    for key, value in accepted.items():
        if key in model:
            t.unless(model[key], value, at + (key,), reasons.get(key, "not supported yet"))
    if "dtype" in model:
        t.skip(at + ("dtype",), "weights load in the type ComfyUI picks; see model.weight_dtype and train.dtype")


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


def _sample(t, sample, at, trigger, distilled):
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
        # for Flux dev ai-toolkit feeds guidance_scale to the guidance embedding, which the sampler
        # here leaves at the model's default; CFG stays off
        t.put("sample", "cfg", 1.0, at + ("guidance_scale",))
        t.skip(at + ("guidance_scale",), "Flux dev samples at cfg 1 with its default guidance 3.5")
    prompts = sample.get("prompts")
    if "samples" in sample:
        items = sample["samples"] if isinstance(sample["samples"], list) else []
        prompts = [item.get("prompt") for item in items if isinstance(item, dict) and item.get("prompt")]
        if any(set(item) - {"prompt"} for item in items if isinstance(item, dict)):
            t.skip(at + ("samples",), "per-sample settings: every prompt uses the sample section's")
    if prompts is not None:
        if isinstance(prompts, str):
            prompts = [prompts]
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise EriDiffusionError(f"{t.text.origin(at)}: {label(at + ('prompts',))} must be a list of prompts.")
        # ai-toolkit writes [trigger] where the trigger word goes
        t.put(
            "sample",
            "prompts",
            [p.replace("[trigger]", trigger) for p in prompts],
            at + ("samples" if "samples" in sample else "prompts",),
        )
    if sample.get("neg"):
        t.skip(at + ("neg",), "samples use an empty negative prompt")
    accepted = {"walk_seed": True, "sample_start_step": 0, "network_multiplier": 1, "guidance_rescale": 0.0}
    for key, value in accepted.items():
        if key in sample:
            t.unless(
                sample[key],
                value,
                at + (key,),
                "not supported yet" if key != "walk_seed" else "prompt k always uses seed + k",
            )
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


def _logging(t, logging, at):
    logging = t.mapping(logging, at, ("log_every", "verbose", "use_wandb", "project_name", "run_name", "tensorboard"))
    if "tensorboard" in logging:
        t.put("logging", "tensorboard", logging["tensorboard"], at + ("tensorboard",))
    if "use_wandb" in logging:
        t.unless(logging["use_wandb"], False, at + ("use_wandb",), "use logging.tensorboard")
    for key in ("log_every", "verbose", "project_name", "run_name"):
        if key in logging:
            t.skip(at + (key,), "the terminal shows every step; see logging.tensorboard")
