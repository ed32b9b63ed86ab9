"""What CacheLatents hands the trainer: every image, clip, reference image and caption variant of a dataset
encoded (or read back from the latent cache) into TrainingData, with its validation and regularization parts."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ...errors import EriDiffusionError
from ...settings import check_settings, check_value, setting, settings_of
from .audio_captions import AudioPrompt
from .cache_checks import check_inputs
from .captions import caption_variants
from .inpaint import inpaint_inputs, mask_on_latent_grid
from .latent_cache import CacheStats, LatentCache


@dataclass(frozen=True)
class CacheSettings:
    """CacheLatents' inputs (and a config file's `cache:` section)."""

    resolution: int = setting(
        1024,
        "Training area is about resolution² (per frame for clips); images and clips "
        "go to aspect-ratio buckets, reference images to their target's.",
        minimum=64,
        maximum=4096,
        multiple=64,  # the bucket step: every bucket side is a multiple of it
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
        group="media",
    )
    edit_instructions: bool = setting(
        False,
        "Qwen-Image-Edit without reference images (a control-less edit LoRA): encode the captions as "
        "edit instructions, as TextEncodeQwenImageEditPlus does without images. Edit pairs with "
        "references are always encoded so.",
        optional=True,
        group="media",
    )
    extra_resolutions: str = setting(
        "",
        "More training sizes beside resolution, comma-separated (e.g. 512, 768; ai-toolkit's resolution "
        "list): every image is also encoded at each, in that size's buckets, and batches of every size "
        "interleave. Validation images stay at resolution.",
        optional=True,
    )
    start_image: bool = setting(
        False,
        "Image-to-video models (Wan 2.1 / Wan 2.2 14B I2V, HunyuanVideo 1.5 I2V): each clip's first frame (a "
        "still: the image itself) conditions it, encoded as ComfyUI's WanImageToVideo / "
        "HunyuanVideo15ImageToVideo encode the start image (ai-toolkit's do_i2v).",
        optional=True,
        group="media",
    )

    def __post_init__(self):
        check_settings(self, "CacheLatents")
        self.extras()

    def extras(self):
        """The extra resolutions as whole numbers, checked as resolution is."""
        extras, resolution = [], settings_of(self)["resolution"]
        for word in self.extra_resolutions.replace(",", " ").split():
            if not word.isdigit():
                info = resolution.info
                raise EriDiffusionError(
                    f"CacheLatents: extra_resolutions holds {word!r}; write sizes of {info.minimum:g}.."
                    f"{info.maximum:g} in steps of {info.multiple}, comma-separated (e.g. 512, 768)."
                )
            check_value(resolution, int(word), f"CacheLatents: extra_resolutions holds {word}, which")
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
    bucket: tuple[int, int]  # (width, height) in pixels; audio: (samples at the VAE's rate, 1)
    captions: tuple[str, ...] = ()  # the caption variants' texts (text-encoder training encodes them live)
    frames: int = 1  # pixel frames the latent encodes (clips: the dataset's frame count)
    reference_latents: tuple[torch.Tensor, ...] = ()  # edit pairs: (C, h, w) latents of the reference images, VAE space
    mask: torch.Tensor | None = None  # (1, h, w) loss mask on the latent grid in [0, 1] (white = 1), CPU
    mirrored: bool = False  # the flipped copy of its image (LoadDataset's flip)
    picture_prompt: bool = False  # captions encoded shown the reference images (Qwen-Image-Edit)
    shown_pictures: tuple[str, ...] = ()  # picture prompts: the reference images' paths (a trained encoder's)
    inpaint: tuple[torch.Tensor, torch.Tensor] | None = None  # inpainting: masked latent (C, h, w), mask (1, H, W)
    # what a host node sets on the sample's conditioning: an image-to-video start image's concat_latent_image
    # and concat_mask (start_image.py; VAE space, CPU), an audio-video clip's frame_rate (as LTXVConditioning)
    conditioning_values: dict[str, Any] = field(default_factory=dict)
    audio_latent: torch.Tensor | None = None  # audio-video (LTX-2): its audio track's (C, t, freq) latent, CPU


@dataclass
class TrainingData:
    """What CacheLatents hands to the trainer."""

    samples: list[TrainingSample]
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
        groups: dict[tuple[int, ...], list[int]] = {}
        for index, sample in enumerate(self.samples):
            groups.setdefault((sample.frames, *sample.bucket), []).extend([index] * self.repeats)
        return groups


@dataclass(frozen=True)
class DataFacts:
    """What a run's data holds, as its checks need it: read from CacheLatents' TrainingData (the graph),
    or from the datasets and the cache settings before anything is encoded (the command line)."""

    samples: int
    masked: tuple[tuple[str, float], ...]  # (image, mean of its mask in [0, 1]) of each masked image
    validation: bool  # held-out or validation images
    class_samples: int  # regularization (class) images; 0: none
    references: bool  # edit references beside the targets
    inpaint: bool  # masked images for an inpainting model (CacheLatents' inpaint)
    audio: bool  # clips' sound encoded beside their frames
    shown_pictures: tuple[str, ...]  # picture prompts' reference images (a trained encoder reads them each step)
    # image-to-video: a sample conditioned on its start image (the command line encodes one on demand)
    start_image_sample: Callable[[], TrainingSample | None] = lambda: None

    @property
    def regularization(self) -> bool:
        return self.class_samples > 0

    @property
    def unmasked(self) -> int:
        return self.samples - len(self.masked)

    @classmethod
    def of(cls, data: TrainingData) -> "DataFacts":
        samples = data.samples
        start = next((s for s in samples if "concat_latent_image" in s.conditioning_values), None)
        return cls(
            samples=len(samples),
            masked=tuple((s.source, float(s.mask.float().mean())) for s in samples if s.mask is not None),
            validation=data.validation is not None,
            class_samples=len(data.regularization.samples) if data.regularization is not None else 0,
            references=any(s.reference_latents for s in samples),
            inpaint=any(s.inpaint is not None for s in samples),
            audio=any(s.audio_latent is not None for s in samples),
            shown_pictures=tuple(sorted({path for s in samples for path in s.shown_pictures})),
            start_image_sample=lambda: start,
        )


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
    start_image=False,
    audio_vae=None,
    clip_vision=None,
) -> "TrainingData":
    """Encode (or read back) every image, clip, reference image and caption variant of `dataset` at
    `resolution` and each of `extra_resolutions` (validation at `resolution` only); clips as the dataset
    samples them. Its held-out records and `validation_dataset`'s become the validation data,
    `regularization_dataset` (DreamBooth's class images) the regularization data. `start_image`
    (image-to-video): each sample conditioned on its first frame (start_image.py; with `clip_vision`,
    its image features too); `audio_vae` (LTX-2's): each clip's audio track encoded beside its frames.
    `processes` of a run of several: each encodes its share (rank, rank + N, ...) into the shared
    cache, then all read every entry back (keyed by content); `progress` counts this process's share."""
    distributed = processes is not None and processes.distributed
    options = {"shuffle_variants": shuffle_variants, "seed": seed, "extra_resolutions": extra_resolutions}
    options.update(validation_dataset=validation_dataset, regularization_dataset=regularization_dataset)
    options.update(edit_instructions=edit_instructions, inpaint=inpaint, start_image=start_image)
    options.update(audio_vae=audio_vae, clip_vision=clip_vision, sweep=not distributed or processes.is_main)
    cache, entries, media = _cache_entries(dataset, vae, clip, resolution, cache_folder, **options)
    every = [entry for group in entries for entry in group]
    if distributed:
        _encode_share(every, cache, progress, processes, dataset, media)
    done = [0]

    def encoded(entry: Entry):
        sample = _sample_of(*entry[:2], cache, *entry[2:], **media)
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


def training_data_facts(dataset, vae, clip, resolution, cache_folder, **options) -> "DataFacts":
    """The DataFacts of what build_training_data (the same arguments, less `progress` and `processes`)
    would encode, its inputs checked, nothing encoded: a start image's sample is encoded when asked for."""
    cache, entries, media = _cache_entries(dataset, vae, clip, resolution, cache_folder, **options)
    records = dataset.records

    def start_image_sample():
        if not (media["start_image"] and entries[0]):
            return None
        entry: Entry = entries[0][0]
        return _sample_of(*entry[:2], cache, *entry[2:], **media)

    return DataFacts(
        samples=len(entries[0]),
        masked=tuple((r.path, r.mask_coverage) for r in records if r.mask),
        validation=bool(entries[1]),
        class_samples=len(entries[2]),
        references=any(record.references for record in records),
        inpaint=cache.inpaint,
        audio=media["audio_vae"] is not None,
        shown_pictures=tuple(sorted({p for r in records if cache.shows_pictures(r.references) for p in r.references})),
        start_image_sample=start_image_sample,
    )


def _cache_entries(
    dataset,
    vae,
    clip,
    resolution,
    cache_folder,
    shuffle_variants=4,
    seed=0,
    validation_dataset=None,
    regularization_dataset=None,
    extra_resolutions=(),
    edit_instructions=False,
    inpaint=False,
    start_image=False,
    audio_vae=None,
    clip_vision=None,
    sweep=True,
):
    """build_training_data's inputs checked: (its LatentCache, the entries to encode, the media options)."""
    media = {"start_image": start_image, "audio_vae": audio_vae, "clip_vision": clip_vision}  # what encodes them
    others = (validation_dataset, regularization_dataset)
    check_inputs(dataset, vae, clip, others, extra_resolutions, edit_instructions, media)
    cache = LatentCache(cache_folder, vae, clip, sweep, edit_instructions, inpaint)
    sizes = (resolution, *extra_resolutions)
    entries = _entries(dataset, validation_dataset, regularization_dataset, shuffle_variants, seed, sizes)
    return cache, entries, media


def _training_data(samples, empty, source, resolution, stats):
    return TrainingData(
        samples, empty, source.captions.dropout_rate, source.repeats, resolution, source.fingerprint(), stats
    )


# One sample to encode: (record, its dataset, resolution, caption options, caption variants wanted, seed, mirror)
Entry = tuple[Any, Any, int, Any, int, int, bool]


def _entries(
    dataset, validation_dataset, regularization_dataset, shuffle_variants, seed, sizes
) -> tuple[list[Entry], list[Entry], list[Entry]]:
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


def _encode_share(every: list[Entry], cache, progress, processes, dataset, media):
    """A run of several processes: this one encodes its share of the entries into the shared cache."""
    processes.barrier()  # rank 0 swept the temp files before anyone writes
    share = every[processes.rank :: processes.world_size]
    for done, entry in enumerate(share):
        _sample_of(*entry[:2], cache, *entry[2:], **media)
        if progress is not None:
            progress(done + 1, len(share))
    if processes.is_main:
        empty_conditioning(cache, dataset)
    processes.barrier()  # every entry is on disk


def _sample_of(
    record,
    source,
    cache,
    resolution,
    options,
    variants_wanted,
    seed,
    mirror=False,
    start_image=False,
    audio_vae=None,
    clip_vision=None,
):
    """The TrainingSample of one record of dataset `source`: its latent, reference latents, mask,
    caption variants, with `start_image` its start image's conditioning values and with `audio_vae`
    its audio track's latent; `mirror`: all of them flipped left to right (the sound stays)."""
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
        shown_pictures=tuple(record.references) if cache.shows_pictures(record.references) else (),
        inpaint=inpaint_inputs(cache, record, bucket, mirror) if cache.inpaint else None,
        conditioning_values={
            **(cache.start_values(record, video, bucket, mirror, clip_vision) if start_image else {}),
            **({"frame_rate": video.fps} if audio_vae is not None else {}),
        },
        audio_latent=cache.clip_audio_latent(record, video, audio_vae) if audio_vae is not None else None,
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
