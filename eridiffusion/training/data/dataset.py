"""A training folder read into a checked, fingerprinted Dataset (LoadDataset's work): images, video
clips and frame folders with their captions, edit references and loss masks, and the images held
out for validation. The folder's files are scanned in folder_scan.py and opened in media.py."""

import hashlib
import json
import logging
import os
from dataclasses import dataclass

from ...errors import EriDiffusionError
from ...settings import check_declared
from .audio import SUPPORTED_AUDIO, AudioOptions, is_audio_file, read_audio
from .audio_captions import AudioPrompt, audio_caption
from .captions import CaptionOptions, with_trigger
from .dataset_settings import MISSING_CAPTION_CHOICES, MISSING_MASK_CHOICES, DatasetSettings, check_caption_fallback
from .folder_scan import (
    METADATA_FILE,
    SUPPORTED_CLIPS,
    SUPPORTED_IMAGES,
    all_references_of,
    check_sidecars,
    masks_of,
    no_caption_error,
    normalize_caption_ext,
    read_caption_files,
    scan_folder,
)
from .held_out import held_out_indices
from .media import (
    VideoOptions,
    check_mask_fits,
    file_sha256,
    is_clip_file,
    length_prefixed,
    media_sha256,
    open_image_rgb,
    read_clip,
)
from .metadata_jsonl import metadata_references, read_metadata

MISSING_CAPTION_MODES = tuple(MISSING_CAPTION_CHOICES.values())
MISSING_MASK_MODES = tuple(MISSING_MASK_CHOICES.values())


@dataclass(frozen=True)
class ImageRecord:
    path: str
    caption: str  # after trigger-word processing
    width: int  # after EXIF orientation
    height: int
    clip: bool = False  # a video clip file or a frame folder rather than a still image
    reference: str = ""  # edit pairs: the reference (control) image this target was made from
    mask: str = ""  # the loss mask of this image (masks/ folder), if any
    mask_coverage: float = 1.0  # the mask's mean, 0 (black: ignore) to 1 (white: learn)
    audio: AudioPrompt | None = None  # an audio file (width and height 0): its lyrics and metadata
    more_references: tuple[str, ...] = ()  # multi-reference edits: the control_2/ and control_3/ images

    @property
    def references(self):
        """Every reference image of this target, in the order the model is shown them."""
        return ((self.reference,) if self.reference else ()) + self.more_references


@dataclass(frozen=True)
class Dataset:
    folder: str
    records: tuple[ImageRecord, ...]
    captions: CaptionOptions
    repeats: int
    video: VideoOptions = VideoOptions()  # how clips are sampled (unused without clips)
    held_out: tuple[ImageRecord, ...] = ()  # records kept out of training to measure validation loss
    flip: bool = False  # also train on every image mirrored left to right (with its mask and reference)
    audio: AudioOptions = AudioOptions()  # how audio files are cut (unused without them)

    @property
    def has_clips(self):
        return any(record.clip for record in self.records)

    @property
    def has_audio(self):
        return any(record.audio is not None for record in self.records + self.held_out)

    def __post_init__(self):
        check_declared(DatasetSettings, "LoadDataset", repeats=self.repeats)

    def fingerprint(self):
        """sha256 hex over every image's (clip's) relative path, bytes, caption and reference image,
        the caption options and, with clips, the frame sampling; the same data gives the same value
        wherever the folder lives and however the records are ordered. Reads the files now, so an
        image edited since loading changes it."""
        digest = hashlib.sha256()
        options = {
            "trigger_word": self.captions.trigger_word,
            "dropout_rate": self.captions.dropout_rate,
            "shuffle_tags": self.captions.shuffle_tags,
            "keep_tags": self.captions.keep_tags,
        }
        if self.has_clips:  # only then: image-only datasets keep the fingerprint they always had
            options.update(frames=self.video.frames, fps=self.video.fps)
        if self.flip:
            options.update(flip=True)
        if self.has_audio:
            options.update(seconds=self.audio.seconds)
        digest.update(json.dumps(options, sort_keys=True).encode())
        named = sorted(
            ((os.path.relpath(record.path, self.folder).replace(os.sep, "/"), record) for record in self.records),
            key=lambda pair: pair[0],
        )
        for name, record in named:
            digest.update(length_prefixed(name.encode()))
            digest.update(media_sha256(record.path))
            digest.update(length_prefixed(record.caption.encode()))
            for reference in record.references:
                digest.update(b"reference" + file_sha256(reference))
            if record.mask:
                digest.update(b"mask" + file_sha256(record.mask))
            if record.audio is not None:
                digest.update(length_prefixed(b"audio" + record.audio.fingerprint().encode()))
        return digest.hexdigest()


def dataset_of(settings: DatasetSettings, folder) -> "Dataset":
    """The Dataset of LoadDataset's `settings`, read from `folder` (the `folder` setting resolved)."""
    return load_dataset(
        folder,
        caption_ext=settings.caption_ext,
        trigger_word=settings.trigger_word.strip(),
        missing_caption=MISSING_CAPTION_CHOICES[settings.missing_caption],
        caption_dropout=settings.caption_dropout,
        shuffle_tags=settings.shuffle_tags,
        keep_tags=settings.keep_tags,
        repeats=settings.repeats,
        frames=settings.frames,
        fps=settings.fps,
        validation=settings.validation,
        missing_mask=MISSING_MASK_CHOICES[settings.missing_mask],
        flip=settings.flip,
        seconds=settings.seconds,
    )


def load_dataset(
    folder,
    caption_ext=".txt",
    trigger_word="",
    missing_caption="error",
    caption_dropout=0.0,
    shuffle_tags=False,
    keep_tags=1,
    repeats=1,
    min_side=64,
    frames=17,
    fps=16.0,
    validation=0.0,
    missing_mask="error",
    flip=False,
    seconds=120.0,
) -> Dataset:
    """Scan `folder`, pair each image, clip (mp4, webm, mov, gif) and frame folder (a subfolder of
    numbered images: one clip) with its caption and, when a control/ (or reference/) subfolder
    exists, with its reference image (and control_2/'s, control_3/'s; or metadata.jsonl's control
    columns'); decode every image and the `frames` frames at `fps` of every clip once to prove they
    are readable, and return the records sorted by name. A `validation`
    fraction of them (evenly spread over the names) is held out of training (Dataset.held_out). With a
    masks/ subfolder each image gets its loss mask; `missing_mask` says what an image without one
    means (MISSING_MASK_MODES). `flip` adds each image mirrored left to right (Dataset.flip). Audio
    files (a folder of them only) are decoded once too, and trained `seconds` long (AudioOptions)."""
    options = CaptionOptions(
        trigger_word=trigger_word, dropout_rate=caption_dropout, shuffle_tags=shuffle_tags, keep_tags=keep_tags
    )
    video = VideoOptions(frames=frames, fps=fps)
    check_declared(DatasetSettings, "LoadDataset", repeats=repeats, validation=validation, seconds=seconds)
    _check_modes(missing_caption, missing_mask, trigger_word, min_side)
    caption_ext = normalize_caption_ext(caption_ext)
    folder = _existing_folder(folder)
    records = _records(folder, caption_ext, missing_caption, missing_mask, trigger_word, video, min_side)
    held = held_out_indices(len(records), validation, folder)
    return Dataset(
        folder=folder,
        records=tuple(r for i, r in enumerate(records) if i not in held),
        captions=options,
        repeats=repeats,
        video=video,
        held_out=tuple(records[i] for i in held),
        flip=flip,
        audio=AudioOptions(seconds=seconds),
    )


def _check_modes(missing_caption, missing_mask, trigger_word, min_side):
    if missing_mask not in MISSING_MASK_MODES:
        raise EriDiffusionError(
            f"missing_mask {missing_mask!r} is not one of {', '.join(MISSING_MASK_MODES)}; pick one of those."
        )
    if missing_caption not in MISSING_CAPTION_MODES:
        raise EriDiffusionError(
            f"missing_caption {missing_caption!r} is not one of {', '.join(MISSING_CAPTION_MODES)}; pick one of those."
        )
    check_caption_fallback(missing_caption, trigger_word)
    if isinstance(min_side, bool) or not isinstance(min_side, int) or min_side < 1:
        raise EriDiffusionError(
            f"min_side {min_side!r} must be a whole number >= 1; "
            "set the smallest image side you accept in pixels (e.g. 64)."
        )


def _existing_folder(folder):
    if not os.path.exists(folder):
        raise EriDiffusionError(
            f"dataset folder {folder} does not exist; check the path "
            "(it should hold the training images and their captions)."
        )
    if not os.path.isdir(folder):
        raise EriDiffusionError(
            f"dataset folder {folder} is a file, not a folder; give the folder that holds the training images."
        )
    return os.path.abspath(folder)


def _records(folder, caption_ext, missing_caption, missing_mask, trigger_word, video, min_side):
    """The ImageRecords of every image, clip and frame folder of `folder`, sorted by name."""
    scan = scan_folder(folder, caption_ext)
    images, has_metadata = scan.images, scan.has_metadata
    mask_folder = scan.mask_folder
    if has_metadata:
        captions = read_metadata(folder, images)
    else:
        captions = read_caption_files(folder, images, scan.caption_files, caption_ext)
    if not images:
        raise EriDiffusionError(
            f"no images in {folder}; supported: {SUPPORTED_IMAGES} images, {SUPPORTED_CLIPS} "
            f"clips and frame folders, or {SUPPORTED_AUDIO} audio files. Put the training files directly in "
            "this folder."
        )
    if scan.audio:
        return _audio_records(folder, scan, captions, caption_ext, missing_caption, trigger_word)
    references = all_references_of(folder, scan, images)
    named = metadata_references(folder, images) if has_metadata else {}
    if named and references:
        raise EriDiffusionError(
            f"{folder} names references both in {METADATA_FILE} and in reference folders; keep one of them."
        )
    references = named or references
    masks = masks_of(folder, mask_folder, images, missing_mask) if mask_folder else {}
    records = []
    for name in sorted(images):
        path = os.path.join(folder, name)
        caption = captions.get(name, "")
        if not caption:
            if missing_caption == "error":
                raise no_caption_error(folder, name, caption_ext, has_metadata, empty=name in captions)
            caption = trigger_word
        clip = os.path.isdir(path) or is_clip_file(name)
        width, height = (read_clip(path, video)[0] if clip else open_image_rgb(path)).size
        if min(width, height) < min_side:
            raise EriDiffusionError(
                f"{path} is {width}x{height}, smaller than {min_side} pixels on its short side "
                "(the least EriDiffusion trains on); remove it from the folder or upscale it."
            )
        coverage = check_mask_fits(masks[name], path, (width, height)) if name in masks else 1.0
        if coverage == 0:
            logging.warning(
                f"EriDiffusion: the mask {masks[name]} is black all over, so {path} teaches nothing unless "
                "TrainingExtras' mask_min is above 0: paint what it should teach white, or remove the image."
            )
        caption = with_trigger(caption, trigger_word)
        (reference, *more), mask = references.get(name, ("",)), masks.get(name, "")
        records.append(ImageRecord(path, caption, width, height, clip, reference, mask, coverage, None, tuple(more)))
    return records


def _audio_records(folder, scan, captions, caption_ext, missing_caption, trigger_word):
    """The ImageRecords of a folder of audio files (nothing else: an image or clip beside them is an
    error), each decoded once to prove it readable, with its caption, lyrics and metadata."""
    check_sidecars(folder, scan)
    others = [name for name in scan.images if not is_audio_file(name)]
    if others or scan.reference_folder or scan.mask_folder or scan.more_reference_folders:
        other = os.path.join(folder, others[0] if others else scan.reference_folder or scan.mask_folder)
        raise EriDiffusionError(
            f"{folder} holds audio files and {other}: a dataset is either audio files (ACE-Step 1.5) or "
            "images and clips; move one kind to its own folder."
        )
    records = []
    for name in sorted(scan.images):
        caption, prompt = audio_caption(folder, name, captions.get(name), scan.sidecars)
        if not caption:
            if missing_caption == "error":
                raise no_caption_error(folder, name, caption_ext, scan.has_metadata, empty=caption is not None)
            caption = trigger_word
        read_audio(os.path.join(folder, name))
        records.append(ImageRecord(os.path.join(folder, name), with_trigger(caption, trigger_word), 0, 0, audio=prompt))
    return records
