"""What CacheLatents hands the trainer: every image, clip, reference image and caption variant of a
dataset encoded (or read back from the latent cache) into TrainingData, with its validation and
regularization parts."""

import os
from dataclasses import dataclass, field

import torch

from ...errors import EriDiffusionError
from ..settings import check_settings, setting
from .audio import is_audio_vae
from .audio_captions import AudioPrompt
from .captions import caption_variants
from .inpaint import inpaint_inputs, mask_on_latent_grid
from .latent_cache import CacheStats, LatentCache
from .media import check_frames_for_vae, file_sha256
from .picture_prompts import reads_images


@dataclass(frozen=True)
class CacheSettings:
    """CacheLatents' inputs (and a config file's `cache:` section)."""

    resolution: int = setting(
        1024,
        "Training area is about resolution² (per frame for clips); images and clips "
        "go to aspect-ratio buckets, reference images to their target's.",
        minimum=64,
        maximum=4096,
        step=64,
    )
    shuffle_variants: int = setting(
        4, "With tag shuffling: how many shuffled captions to encode per image.", minimum=1, maximum=32
    )
    cache_folder: str = setting("", "Where encodings are kept; empty: output/eridiffusion_cache.", path=True)
    inpaint: bool = setting(
        False,
        "Inpainting models (Flux Fill): each image is also encoded with its masks/ region grayed out and "
        "given with its mask, as InpaintModelConditioning gives them, so the model learns to fill the white "
        "region (an image without a mask: all of it).",
        optional=True,
    )
    edit_instructions: bool = setting(
        False,
        "Qwen-Image-Edit without reference images (a control-less edit LoRA): encode the captions as "
        "edit instructions, as TextEncodeQwenImageEditPlus does without images. Edit pairs with "
        "references are always encoded so.",
        optional=True,
    )
    extra_resolutions: str = setting(
        "",
        "More training sizes beside resolution, comma-separated (e.g. 512, 768; ai-toolkit's resolution "
        "list): every image is also encoded at each, in that size's buckets, and batches of every size "
        "interleave. Validation images stay at resolution.",
        optional=True,
    )

    def __post_init__(self):
        check_settings(self, "CacheLatents")
        self.extras()

    def extras(self):
        """The extra resolutions as whole numbers, checked as resolution is."""
        extras = []
        for word in self.extra_resolutions.replace(",", " ").split():
            if not word.isdigit() or not 64 <= int(word) <= 4096 or int(word) % 64:
                raise EriDiffusionError(
                    f"CacheLatents: extra_resolutions holds {word!r}; write sizes of 64..4096 in steps of 64, "
                    "comma-separated (e.g. 512, 768)."
                )
            if int(word) == self.resolution or int(word) in extras:
                raise EriDiffusionError(
                    f"CacheLatents: extra_resolutions lists {word} twice (resolution is {self.resolution}); "
                    "name each size once."
                )
            extras.append(int(word))
        return tuple(extras)


@dataclass
class TrainingSample:
    source: str
    latent: torch.Tensor  # (C, h, w), or (C, t, h, w) from a video VAE; VAE space, CPU
    conditionings: list  # ComfyUI conditionings, one per caption variant
    bucket: tuple  # (width, height) in pixels; audio: (samples at the VAE's rate, 1)
    captions: tuple = ()  # the caption variants' texts (text-encoder training encodes them live)
    frames: int = 1  # pixel frames the latent encodes (clips: the dataset's frame count)
    reference_latents: tuple = ()  # edit pairs: (C, h, w) latents of the reference images, VAE space
    mask: torch.Tensor | None = None  # (1, h, w) loss mask on the latent grid in [0, 1] (white = 1), CPU
    mirrored: bool = False  # the flipped copy of its image (LoadDataset's flip)
    picture_prompt: bool = False  # captions encoded shown the reference images (Qwen-Image-Edit)
    inpaint: tuple | None = None  # inpainting models: (masked image latent (C, h, w), mask (1, H, W) pixels)


@dataclass
class TrainingData:
    """What CacheLatents hands to the trainer."""

    samples: list
    empty_conditioning: list  # the "" prompt, used for caption dropout
    caption_dropout: float
    repeats: int
    resolution: int
    dataset_fingerprint: str
    stats: CacheStats = field(default_factory=CacheStats)
    validation: "TrainingData | None" = None  # held-out images (and a validation folder's): never trained on
    regularization: "TrainingData | None" = None  # class images drawn beside the training images

    def buckets(self):
        """{(frames, width, height): [sample indices]}, each index listed `repeats` times: samples
        of one group have latents of one shape, so they batch."""
        groups = {}
        for index, sample in enumerate(self.samples):
            groups.setdefault((sample.frames, *sample.bucket), []).extend([index] * self.repeats)
        return groups


def check_datasets_apart(dataset, validation_dataset=None, regularization_dataset=None):
    """Refuse validation or class images that are training images: the validation loss would then
    measure memorisation (and pick best.safetensors by it), class images would teach the subject.
    The same folder, or the same files (by their bytes) in another, are an error naming them."""
    training = _files_by_size(dataset.records + dataset.held_out)
    for other, role, fix in (
        (
            validation_dataset,
            "validation",
            "connect a folder of images never trained on, or hold some out with LoadDataset's validation fraction",
        ),
        (regularization_dataset, "regularization (class)", "connect a folder of other images of the class"),
    ):
        if other is None:
            continue
        if os.path.realpath(other.folder) == os.path.realpath(dataset.folder):
            raise EriDiffusionError(f"the {role} dataset is the training folder {dataset.folder}; {fix}.")
        for record in other.records + other.held_out:
            twin = _same_file(record.path, training)
            if twin is not None:
                raise EriDiffusionError(
                    f"{record.path} of the {role} dataset is the training image {twin} (the same bytes); {fix}."
                )


def _files_by_size(records):
    sizes = {}
    for record in records:
        if os.path.isfile(record.path):
            sizes.setdefault(os.path.getsize(record.path), []).append(record.path)
    return sizes


def _same_file(path, by_size):
    """The file of `by_size` ({bytes: [paths]}) with the bytes of `path`, or None (hashed only where sizes match)."""
    if not os.path.isfile(path):
        return None
    candidates = by_size.get(os.path.getsize(path), [])
    if not candidates:
        return None
    digest = file_sha256(path)
    return next((other for other in candidates if file_sha256(other) == digest), None)


def check_vae_takes_clips(dataset, vae):
    """Refuse clips a VAE cannot encode: an image VAE, or a frame count off the VAE's k*n+1 rule."""
    if not dataset.has_clips:
        return
    if getattr(vae, "latent_dim", 2) != 3:
        raise EriDiffusionError(
            f"{dataset.folder} holds video clips, but this VAE encodes still images; "
            "connect the VAE of a video model (Wan, HunyuanVideo, LTX-Video) to CacheLatents "
            "or remove the clips."
        )
    temporal = vae.temporal_compression_decode() or 1
    check_frames_for_vae(dataset.video.frames, temporal, f"dataset {dataset.folder}")


def check_vae_takes_media(dataset, vae):
    """Refuse a dataset the VAE cannot encode: audio files for an image or video VAE, images or clips
    for an audio VAE (checked before anything is encoded)."""
    if dataset.has_audio and not is_audio_vae(vae):
        raise EriDiffusionError(
            f"{dataset.folder} holds audio files, but this VAE encodes images: audio trains an audio model "
            "(ACE-Step 1.5); connect that model's audio VAE to CacheLatents, or give LoadDataset a folder of images."
        )
    if not dataset.has_audio and is_audio_vae(vae):
        raise EriDiffusionError(
            f"this VAE encodes audio (an audio model's, such as ACE-Step 1.5's), but {dataset.folder} holds images "
            "or clips; give LoadDataset a folder of audio files (flac, wav, mp3, ogg) with their captions."
        )
    check_vae_takes_clips(dataset, vae)


def build_training_data(
    dataset,
    vae,
    clip,
    resolution,
    cache_folder,
    shuffle_variants=4,
    seed=0,
    progress=None,
    validation_dataset=None,
    regularization_dataset=None,
    processes=None,
    extra_resolutions=(),
    edit_instructions=False,
    inpaint=False,
) -> "TrainingData":
    """Encode (or read back) every image, clip, reference image and caption variant of `dataset` at
    `resolution` and at each of `extra_resolutions` (one sample per size, in that size's buckets;
    validation stays at `resolution`); clips are sampled as the dataset says (its frames and fps). The
    dataset's held-out records and those of `validation_dataset` (a second DATASET) become the validation data, and
    `regularization_dataset` (class images, DreamBooth's prior preservation) the regularization data.

    `processes` (distributed.TrainingProcesses) of a run of several: each process first encodes its
    share of the entries (rank, rank + N, ...) into the shared cache folder and, once all have, reads
    every entry back. Entries are keyed by content, so they are the ones one process would write;
    `progress` then counts this process's share."""
    check_inputs(dataset, vae, clip, (validation_dataset, regularization_dataset), extra_resolutions, edit_instructions)
    distributed = processes is not None and processes.distributed
    sweep = not distributed or processes.is_main
    cache = LatentCache(cache_folder, vae, clip, sweep, edit_instructions, inpaint)
    sizes = (resolution, *extra_resolutions)
    entries = _entries(dataset, validation_dataset, regularization_dataset, shuffle_variants, seed, sizes)
    every = [entry for group in entries for entry in group]
    if distributed:
        _encode_share(every, cache, progress, processes, dataset)
    done = [0]

    def encoded(entry):
        sample = _sample_of(*entry[:2], cache, *entry[2:])
        done[0] += 1
        if progress is not None and not distributed:
            progress(done[0], len(every))
        return sample

    samples, held_out, class_samples = ([encoded(entry) for entry in group] for group in entries)
    empty = empty_conditioning(cache, dataset)
    validation_data = None
    if held_out:
        validation_data = TrainingData(held_out, empty, 0.0, 1, resolution, "", cache.stats)
    regularization = None
    if regularization_dataset is not None:
        regularization = _training_data(class_samples, empty, regularization_dataset, resolution, cache.stats)
    training = _training_data(samples, empty, dataset, resolution, cache.stats)
    training.validation, training.regularization = validation_data, regularization
    return training


def check_inputs(dataset, vae, clip, others, extra_resolutions, edit_instructions):
    """Everything wrong with build_training_data's inputs that shows before anything is encoded."""
    check_datasets_apart(dataset, *others)
    for source in (dataset, *others):
        if source is not None:
            check_vae_takes_media(source, vae)
    if edit_instructions and not reads_images(clip):
        raise EriDiffusionError(
            "CacheLatents: edit_instructions encodes captions as Qwen-Image-Edit's instructions, but this CLIP is "
            "not Qwen-Image's vision-language encoder; turn edit_instructions off."
        )
    if extra_resolutions and dataset.has_audio:
        raise EriDiffusionError(
            f"{dataset.folder} holds audio files, which have no pixel size: clear CacheLatents' extra_resolutions."
        )


def _training_data(samples, empty, source, resolution, stats):
    return TrainingData(
        samples, empty, source.captions.dropout_rate, source.repeats, resolution, source.fingerprint(), stats
    )


def _entries(dataset, validation_dataset, regularization_dataset, shuffle_variants, seed, sizes):
    """The entries to encode, (record, its dataset, resolution, caption options, variants, seed,
    mirror) each, of the training, validation and regularization data in turn; training and class
    images at every resolution of `sizes`, validation images at the first."""

    def training_entries(source):
        """The entries of every record of DATASET `source` (and its mirror image, with flip) at each size."""
        wanted = shuffle_variants if source.captions.shuffle_tags else 1
        return [
            (record, source, size, source.captions, wanted, seed + index, mirror)
            for size in sizes
            for index, record in enumerate(source.records)
            for mirror in ((False, True) if source.flip else (False,))
        ]

    validation = [(record, dataset) for record in dataset.held_out]
    if validation_dataset is not None:
        validation += [(r, validation_dataset) for r in validation_dataset.records + validation_dataset.held_out]
    return (
        training_entries(dataset),
        [(r, source, sizes[0], dataset.captions, 1, seed + i, False) for i, (r, source) in enumerate(validation)],
        training_entries(regularization_dataset) if regularization_dataset is not None else [],
    )


def _encode_share(every, cache, progress, processes, dataset):
    """A run of several processes: this one encodes its share of the entries into the shared cache."""
    processes.barrier()  # rank 0 swept the temp files before anyone writes
    share = every[processes.rank :: processes.world_size]
    for done, entry in enumerate(share):
        _sample_of(*entry[:2], cache, *entry[2:])
        if progress is not None:
            progress(done + 1, len(share))
    if processes.is_main:
        empty_conditioning(cache, dataset)
    processes.barrier()  # every entry is on disk


def _sample_of(record, source, cache, resolution, options, variants_wanted, seed, mirror=False):
    """The TrainingSample of one record of dataset `source`: its latent, reference latents, mask and
    caption variants; `mirror`: all of them flipped left to right."""
    video = source.video
    if record.audio is not None:
        return _audio_sample(record, source, cache, options, variants_wanted, seed)
    if record.clip:
        latent, bucket = cache.clip_latent(record, resolution, video, mirror)
    else:
        latent, bucket = cache.latent(record.path, resolution, mirror=mirror)
    references = tuple(cache.latent(path, resolution, bucket, mirror)[0] for path in record.references)
    texts = caption_variants(record.caption, options, variants_wanted, seed)
    return TrainingSample(
        record.path,
        latent,
        [cache.caption(t, record.references, mirror) for t in texts],
        bucket,
        tuple(texts),
        video.frames if record.clip else 1,
        references,
        mask_on_latent_grid(record, bucket, latent.shape[-2:], mirror) if record.mask else None,
        mirrored=mirror,
        picture_prompt=cache.shows_pictures(record.references),
        inpaint=inpaint_inputs(cache, record, bucket, mirror) if cache.inpaint else None,
    )


def empty_conditioning(cache, dataset):
    """The conditioning caption dropout trains on: the "" prompt's or, for audio, ConditioningZeroOut
    of it (the negative ACE-Step 1.5 is sampled with: its model then reads its learned null
    embedding, as ACE-Step's trainer drops captions)."""
    if not dataset.has_audio:
        return cache.conditioning("")
    import nodes  # ComfyUI's

    keywords = AudioPrompt().text_keywords(dataset.audio.seconds)
    return nodes.ConditioningZeroOut().zero_out(cache.conditioning("", keywords))[0]


def _audio_sample(record, source, cache, options, variants_wanted, seed):
    """The TrainingSample of an audio file: its latent and its tags' variants, each encoded with the
    file's lyrics and metadata at the training length."""
    latent, bucket = cache.audio_latent(record, source.audio)
    texts = caption_variants(record.caption, options, variants_wanted, seed)
    keywords = record.audio.text_keywords(source.audio.seconds)
    return TrainingSample(record.path, latent, [cache.conditioning(t, keywords) for t in texts], bucket, tuple(texts))
