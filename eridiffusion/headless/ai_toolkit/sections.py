"""ai-toolkit's config format (`job: extension`, `config.process[0]` with network, save, datasets,
train, model, sample) turned into EriDiffusion's sections. Keys EriDiffusion reads but cannot honour
yet are collected, to be listed in one warning; keys ai-toolkit does not have are errors."""

from ...errors import EriDiffusionError
from .training import sample_section, train_section
from .translation import (
    ALGORITHMS,
    ARCH_FLAGS,
    DTYPES,
    GUIDANCE_DISTILLED,
    OWN_MODEL_KEYS,
    TINY_NAMES,
    TRAINER_TYPES,
    Translation,
    label,
)


def is_ai_toolkit(values):
    return "job" in values or "config" in values


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
        if not isinstance(config["name"], str) or not config["name"].strip():
            raise EriDiffusionError(
                f"{text.origin(('config', 'name'))}: config.name is {config['name']!r}; give the run's name "
                "(it names the run folder and the LoRA file)."
            )
        t.put("train", "run_name", config["name"], ("config", "name"))
        t.put("save", "filename_prefix", config["name"], ("config", "name"))
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
    train_section(t, train, at + ("train",))
    if "model" in process:
        _model(t, process["model"], at + ("model",))
    model = process.get("model") if isinstance(process.get("model"), dict) else {}
    _start_image(t, datasets, regularization, str(model.get("arch", "")).lower(), at + ("datasets",))
    _audio(t, datasets[regularization.index(False)], model, at + ("datasets", regularization.index(False)))
    disabled = isinstance(train, dict) and train.get("disable_sampling") is True
    distilled = model.get("is_flux") is True or str(model.get("arch", "")).lower() in GUIDANCE_DISTILLED
    if "sample" in process and not disabled:
        sample_section(t, process["sample"], at + ("sample",), trigger or "", distilled)
    if "logging" in process:
        _logging(t, process["logging"], at + ("logging",))


# ai-toolkit's image-to-video archs: trained from each clip's first frame (its do_i2v, default true).
I2V_ARCHS = ("wan21_i2v", "wan22_14b_i2v")


def _start_image(t, datasets, regularization, arch, at):
    """ai-toolkit's do_i2v (default true): for an image-to-video arch, CacheLatents' start_image. Other
    archs take no start image (ai-toolkit's text-and-image-to-video Wan 2.2 5B included: not here yet)."""
    index = regularization.index(False)
    given = datasets[index].get("do_i2v")
    for k, dataset in enumerate(datasets):
        if k != index and "do_i2v" in dataset:
            t.skip(at + (k, "do_i2v"), "class images follow the training dataset's start_image")
    if arch in I2V_ARCHS:
        t.put("cache", "start_image", given is not False, at + (index, "do_i2v"))
    elif given:
        t.skip(at + (index, "do_i2v"), f"arch {arch or 'unset'} is no image-to-video model ({', '.join(I2V_ARCHS)})")


def _audio(t, dataset, model, at):
    """ai-toolkit's do_audio (LTX-2's audio track trained too): EriDiffusion trains the audio when the
    model section names its audio VAE (model.audio_vae); the two must agree."""
    if bool(dataset.get("do_audio", False)) != bool(model.get("audio_vae")):
        raise EriDiffusionError(
            f"{t.text.origin(at)}: {label(at + ('do_audio',))} is {dataset.get('do_audio', False)!r} but "
            f"model.audio_vae is {'given' if model.get('audio_vae') else 'not given'}: audio-video training (LTX-2) "
            "reads each clip's audio track with the audio VAE; set both (do_audio: true and model.audio_vae: "
            "the audio VAE file) or neither."
        )


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
    "audio_normalize": False,
    "audio_preserve_pitch": True,  # the sound is never time-stretched here (frames are sampled at fps)
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
    "do_i2v",
    "do_audio",
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
        if len(sizes) > 1:  # every size trains: the largest is CacheLatents' resolution, the rest extra
            extra = ", ".join(str(s) for s in sorted(set(sizes) - {max(sizes)}))
            t.put("cache", "extra_resolutions", extra, at + ("resolution",))
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
        "low_vram": "see train.vram_budget_gib (block swap as the budget plans)",
        "quantize_te": "text encoders load as ComfyUI loads them",
        "te_name_or_path": "give model.text_encoders files",
        "is_v_pred": "ComfyUI detects the prediction type from the file",
    }
    for key, value in accepted.items():
        if key in model:
            t.unless(model[key], value, at + (key,), reasons.get(key, "not supported yet"))
    if "dtype" in model:
        t.skip(at + ("dtype",), "weights load in the type ComfyUI picks; see model.weight_dtype and train.dtype")


def _logging(t, logging, at):
    logging = t.mapping(logging, at, ("log_every", "verbose", "use_wandb", "project_name", "run_name", "tensorboard"))
    if "tensorboard" in logging:
        t.put("logging", "tensorboard", logging["tensorboard"], at + ("tensorboard",))
    if "use_wandb" in logging:
        t.unless(logging["use_wandb"], False, at + ("use_wandb",), "use logging.tensorboard")
    for key in ("log_every", "verbose", "project_name", "run_name"):
        if key in logging:
            t.skip(at + (key,), "the terminal shows every step; see logging.tensorboard")
