"""Reads a training folder (images, video clips and frame folders with caption files, or a
metadata.jsonl; optionally a control/ folder of edit references) into a checked, fingerprinted
Dataset, and opens its images as RGB."""

import hashlib
import json
import os
import random
import re
from dataclasses import dataclass

from PIL import Image, ImageOps

from .clips import VIDEO_EXTENSIONS, VideoOptions, frame_folder_files, is_clip_file, read_clip
from .errors import EriDiffusionError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp")
METADATA_FILE = "metadata.jsonl"
MISSING_CAPTION_MODES = ("error", "trigger_word")
# Edit-pair datasets (Flux Kontext, Qwen-Image Edit): a subfolder of this name holds, for each
# target image, the reference image it was edited from under the same stem (ai-toolkit's and
# musubi-tuner's control images).
REFERENCE_FOLDERS = ("control", "reference")
# A subfolder of this name holds loss masks: for an image, a greyscale image of the same stem (white:
# learn, black: ignore, grey: in between), fitted to the image's bucket exactly as the image is.
MASK_FOLDER = "masks"
MISSING_MASK_MODES = ("error", "weight_1")  # an image without a mask: an error, or it weighs 1 everywhere

_SUPPORTED = ", ".join(ext[1:] for ext in IMAGE_EXTENSIONS)
_SUPPORTED_CLIPS = ", ".join(ext[1:] for ext in VIDEO_EXTENSIONS)
# Modes Pillow gives 16-bit grayscale PNGs; its own convert() clips them to 8 bits instead of scaling.
_WIDE_GRAY_MODES = ("I", "I;16", "I;16L", "I;16B", "I;16N")


@dataclass(frozen=True)
class CaptionOptions:
    trigger_word: str = ""
    dropout_rate: float = 0.0  # the trainer swaps in an empty caption with this probability
    shuffle_tags: bool = False
    keep_tags: int = 1  # leading tags that shuffling leaves in place (the trigger word among them)

    def __post_init__(self):
        if not isinstance(self.trigger_word, str):
            raise EriDiffusionError(
                f"trigger_word must be text, got {self.trigger_word!r}; give a word such as 'sks' or leave it empty."
            )
        if self.trigger_word != self.trigger_word.strip():
            raise EriDiffusionError(f"trigger_word {self.trigger_word!r} has surrounding spaces; remove them.")
        if not isinstance(self.dropout_rate, (int, float)) or not 0.0 <= self.dropout_rate <= 1.0:
            raise EriDiffusionError(
                f"caption dropout {self.dropout_rate} is outside 0..1; set a probability such as 0.05 (0 turns it off)."
            )
        if isinstance(self.keep_tags, bool) or not isinstance(self.keep_tags, int) or self.keep_tags < 0:
            raise EriDiffusionError(
                f"keep_tags {self.keep_tags!r} must be a whole number >= 0; "
                "set how many leading tags stay in place when shuffling (usually 1)."
            )


@dataclass(frozen=True)
class ImageRecord:
    path: str
    caption: str  # after trigger-word processing
    width: int  # after EXIF orientation
    height: int
    clip: bool = False  # a video clip file or a frame folder rather than a still image
    reference: str = ""  # edit pairs: the reference (control) image this target was made from
    mask: str = ""  # the loss mask of this image (masks/ folder), if any


@dataclass(frozen=True)
class Dataset:
    folder: str
    records: tuple[ImageRecord, ...]
    captions: CaptionOptions
    repeats: int
    video: VideoOptions = VideoOptions()  # how clips are sampled (unused without clips)
    held_out: tuple[ImageRecord, ...] = ()  # records kept out of training to measure validation loss
    flip: bool = False  # also train on every image mirrored left to right (with its mask and reference)

    @property
    def has_clips(self):
        return any(record.clip for record in self.records)

    def __post_init__(self):
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 1:
            raise EriDiffusionError(
                f"repeats {self.repeats!r} must be a whole number >= 1; "
                "set how many times each image is seen per epoch (1 for once)."
            )

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
        digest.update(json.dumps(options, sort_keys=True).encode())
        named = sorted(
            ((os.path.relpath(record.path, self.folder).replace(os.sep, "/"), record) for record in self.records),
            key=lambda pair: pair[0],
        )
        for name, record in named:
            digest.update(_length_prefixed(name.encode()))
            digest.update(media_sha256(record.path))
            digest.update(_length_prefixed(record.caption.encode()))
            if record.reference:
                digest.update(b"reference" + _file_sha256(record.reference))
            if record.mask:
                digest.update(b"mask" + _file_sha256(record.mask))
        return digest.hexdigest()


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
):
    """Scan `folder`, pair each image, clip (mp4, webm, mov, gif) and frame folder (a subfolder of
    numbered images: one clip) with its caption and, when a control/ (or reference/) subfolder
    exists, with its reference image; decode every image and the `frames` frames at `fps` of every
    clip once to prove they are readable, and return the records sorted by name. A `validation`
    fraction of them (evenly spread over the names) is held out of training (Dataset.held_out). With a
    masks/ subfolder each image gets its loss mask; `missing_mask` says what an image without one
    means (MISSING_MASK_MODES). `flip` adds each image mirrored left to right (Dataset.flip)."""
    options = CaptionOptions(
        trigger_word=trigger_word, dropout_rate=caption_dropout, shuffle_tags=shuffle_tags, keep_tags=keep_tags
    )
    video = VideoOptions(frames=frames, fps=fps)
    if missing_mask not in MISSING_MASK_MODES:
        raise EriDiffusionError(
            f"missing_mask {missing_mask!r} is not one of {', '.join(MISSING_MASK_MODES)}; pick one of those."
        )
    if missing_caption not in MISSING_CAPTION_MODES:
        raise EriDiffusionError(
            f"missing_caption {missing_caption!r} is not one of {', '.join(MISSING_CAPTION_MODES)}; pick one of those."
        )
    if missing_caption == "trigger_word" and not trigger_word:
        raise EriDiffusionError(
            "missing_caption='trigger_word' captions uncaptioned images with the "
            "trigger word, but trigger_word is empty; set a trigger word or use "
            "missing_caption='error'."
        )
    if isinstance(min_side, bool) or not isinstance(min_side, int) or min_side < 1:
        raise EriDiffusionError(
            f"min_side {min_side!r} must be a whole number >= 1; "
            "set the smallest image side you accept in pixels (e.g. 64)."
        )
    caption_ext = _normalize_caption_ext(caption_ext)
    if not os.path.exists(folder):
        raise EriDiffusionError(
            f"dataset folder {folder} does not exist; check the path "
            "(it should hold the training images and their captions)."
        )
    if not os.path.isdir(folder):
        raise EriDiffusionError(
            f"dataset folder {folder} is a file, not a folder; give the folder that holds the training images."
        )
    folder = os.path.abspath(folder)

    images, caption_files, has_metadata, reference_folder, mask_folder = _scan(folder, caption_ext)
    if has_metadata:
        captions = _read_metadata(folder, images)
    else:
        captions = _read_caption_files(folder, images, caption_files, caption_ext)
    if not images:
        raise EriDiffusionError(
            f"no images in {folder}; supported: {_SUPPORTED} images, {_SUPPORTED_CLIPS} "
            "clips and frame folders. Put the training images directly in this folder."
        )
    references = _references(folder, reference_folder, images) if reference_folder else {}
    masks = _masks(folder, mask_folder, images, missing_mask) if mask_folder else {}

    records = []
    for name in sorted(images):
        path = os.path.join(folder, name)
        caption = captions.get(name, "")
        if not caption:
            if missing_caption == "error":
                raise _no_caption_error(folder, name, caption_ext, has_metadata, empty=name in captions)
            caption = trigger_word
        clip = os.path.isdir(path) or is_clip_file(name)
        width, height = (read_clip(path, video)[0] if clip else open_image_rgb(path)).size
        if min(width, height) < min_side:
            raise EriDiffusionError(
                f"{path} is {width}x{height}, smaller than {min_side} pixels on its short side "
                "(the least EriDiffusion trains on); remove it from the folder or upscale it."
            )
        if name in masks:
            check_mask_fits(masks[name], path, (width, height))
        records.append(
            ImageRecord(
                path=path,
                caption=_with_trigger(caption, trigger_word),
                width=width,
                height=height,
                clip=clip,
                reference=references.get(name, ""),
                mask=masks.get(name, ""),
            )
        )
    held = held_out_indices(len(records), validation, folder)
    return Dataset(
        folder=folder,
        records=tuple(r for i, r in enumerate(records) if i not in held),
        captions=options,
        repeats=repeats,
        video=video,
        held_out=tuple(records[i] for i in held),
        flip=flip,
    )


MAX_VALIDATION_FRACTION = 0.5


def held_out_indices(count, fraction, folder):
    """Indices of the `fraction` of `count` name-sorted records held out for validation, spread
    evenly over the names: no randomness, so a folder always splits the same way."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise EriDiffusionError(f"validation {fraction!r} must be a fraction such as 0.1 (0 turns it off).")
    if not 0.0 <= fraction <= MAX_VALIDATION_FRACTION:
        raise EriDiffusionError(
            f"validation {fraction} is outside 0..{MAX_VALIDATION_FRACTION}: it is the fraction of the images "
            "held out of training (0.1 is usual, 0 turns it off)."
        )
    if fraction == 0:
        return set()
    held = max(1, round(count * fraction))
    if held >= count:
        raise EriDiffusionError(
            f"{folder} has {count} image(s): holding out a validation fraction of {fraction} leaves none "
            "to train on; add images, or connect a separate validation folder to CacheLatents instead."
        )
    return {int((i + 0.5) * count / held) for i in range(held)}


def _no_caption_error(folder, name, caption_ext, has_metadata, empty):
    """The error for an image (clip) whose caption is missing, or present but empty."""
    path = os.path.join(folder, name)
    what = " (a frame folder, read as one clip)" if os.path.isdir(path) else ""
    option = "or set missing_caption to 'use trigger word' to caption it with the trigger word."
    caption_file = os.path.join(folder, _stem(folder, name) + caption_ext)
    if empty and has_metadata:
        return EriDiffusionError(
            f"{path}{what} has an empty caption in {METADATA_FILE}; write its text there, {option}"
        )
    if empty:
        return EriDiffusionError(
            f"{caption_file}, the caption of {path}{what}, is empty; write the caption in it, {option}"
        )
    where = (
        f"add a line for it to {METADATA_FILE}" if has_metadata else f"write {os.path.basename(caption_file)} beside it"
    )
    return EriDiffusionError(f"{path}{what} has no caption; {where}, {option}")


def _open_upright(path, what, missing_fix, unreadable_fix):
    """The file at `path` fully decoded and turned upright by its EXIF orientation; each way it cannot
    be opened is an error naming it (`what`: "" for an image, "mask " for a mask) and the fix."""
    try:
        with Image.open(path) as stored:
            stored.load()
            return ImageOps.exif_transpose(stored)
    except FileNotFoundError:
        raise EriDiffusionError(f"{what}{path} does not exist; {missing_fix}.") from None
    except PermissionError:
        raise EriDiffusionError(
            f"{what}{path} cannot be opened: permission denied; make it readable by the user running ComfyUI."
        ) from None
    except Image.DecompressionBombError as error:
        raise EriDiffusionError(
            f"{what}{path} is larger than Pillow's safety limit ({error}); downscale it before training."
        ) from error
    except (OSError, SyntaxError, ValueError) as error:
        raise EriDiffusionError(f"{what}{path} cannot be read as an image ({error}); {unreadable_fix}") from error


def _eight_bit_gray(image):
    """A 16-bit (or 32-bit integer) grayscale image scaled to 8 bits."""
    return image.convert("I").point(lambda value: value * (255 / 65535) + 0.5).convert("L")


def open_image_rgb(path):
    """The image at `path`, fully decoded, turned upright by its EXIF orientation, in RGB;
    transparency is composited on white and 16-bit grayscale scaled to 8 bits."""
    image = _open_upright(
        path,
        "",
        "check the path or reload the dataset",
        "it is corrupt or truncated: re-export it from the original or remove it.",
    )
    if image.mode in _WIDE_GRAY_MODES:
        if "transparency" in image.info:
            raise EriDiffusionError(
                f"{path} is 16-bit grayscale with a transparent color key, which "
                "EriDiffusion does not composite; re-export it as 8-bit RGBA or RGB."
            )
        return _eight_bit_gray(image).convert("RGB")
    if image.mode == "RGB":
        return image
    try:
        if image.has_transparency_data:
            white = Image.new("RGBA", image.size, (255, 255, 255, 255))
            return Image.alpha_composite(white, image.convert("RGBA")).convert("RGB")
        return image.convert("RGB")
    except ValueError as error:
        raise EriDiffusionError(
            f"{path} is in color mode {image.mode}, which Pillow cannot turn into "
            f"RGB ({error}); re-export it as an RGB png or jpg."
        ) from None


def caption_variants(caption, options, count, seed):
    """Up to `count` captions to train on for one image: the caption itself first, then seeded tag
    shuffles (comma-separated tags, the first keep_tags left in place). Without shuffle_tags there
    is nothing to vary, so the answer is just [caption]. Shuffles may repeat when there are few tags."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise EriDiffusionError(
            f"caption variant count {count!r} must be a whole number >= 1; ask for at least the caption itself."
        )
    if not options.shuffle_tags:
        return [caption]
    tags = [tag.strip() for tag in caption.split(",") if tag.strip()]
    kept, movable = tags[: options.keep_tags], tags[options.keep_tags :]
    rng = random.Random(seed)
    variants = [caption]
    for _ in range(count - 1):
        shuffled = list(movable)
        rng.shuffle(shuffled)
        variants.append(", ".join(kept + shuffled))
    return variants


def _normalize_caption_ext(caption_ext):
    ext = caption_ext.strip() if isinstance(caption_ext, str) else ""
    if ext and not ext.startswith("."):
        ext = "." + ext
    if len(ext) < 2 or "/" in ext or "\\" in ext:
        raise EriDiffusionError(
            f"caption extension {caption_ext!r} is not a file extension; give one such as '.txt' or 'caption'."
        )
    if ext.lower() in IMAGE_EXTENSIONS + VIDEO_EXTENSIONS:
        kind = "an image" if ext.lower() in IMAGE_EXTENSIONS else "a clip"
        raise EriDiffusionError(
            f"caption extension {caption_ext!r} is {kind} extension; "
            "give the extension of the caption text files, such as '.txt'."
        )
    return ext


def _scan(folder, caption_ext):
    """Image, clip and frame-folder names, {stem: caption file name}, whether metadata.jsonl is
    present, and the reference and mask folders' names (or None); any other visible file is an error
    so nothing the user meant to train on is skipped silently."""
    images, frame_folders, caption_files, has_metadata, reference_folder = [], [], {}, False, None
    mask_folder = None
    loose_folders = {}  # subfolders holding other things than frames: clips only when captioned
    with os.scandir(folder) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            name = entry.name
            if name.startswith("."):
                continue
            if entry.is_dir():
                if name.lower() in REFERENCE_FOLDERS:
                    if reference_folder is not None:
                        raise EriDiffusionError(
                            f"{folder} has both {reference_folder}/ and {name}/ reference "
                            "folders; keep the reference images in one of them."
                        )
                    reference_folder = name
                    continue
                if name.lower() == MASK_FOLDER:
                    mask_folder = name
                    continue
                frames, others = frame_folder_files(entry.path)
                if frames and not others:
                    frame_folders.append(name)  # one clip
                elif frames:
                    loose_folders[name] = others[0]
                continue  # other subfolders are not read (rejects, backups)
            lowered = name.lower()
            if name == METADATA_FILE:
                has_metadata = True
            elif os.path.splitext(lowered)[1] in IMAGE_EXTENSIONS + VIDEO_EXTENSIONS:
                images.append(name)
            elif lowered.endswith(caption_ext.lower()) and len(name) > len(caption_ext):
                stem = name[: -len(caption_ext)]
                if stem in caption_files:
                    raise EriDiffusionError(
                        f"{os.path.join(folder, name)} and {caption_files[stem]} "
                        f"both caption '{stem}'; delete one of them."
                    )
                caption_files[stem] = name
            elif lowered in ("metadata.csv", "metadata.json", "metadata.parquet"):
                raise EriDiffusionError(
                    f"{os.path.join(folder, name)}: EriDiffusion reads captions from "
                    f"{METADATA_FILE} (one JSON object per line with file_name and "
                    "text); convert it to that or to one caption file per image."
                )
            else:
                raise EriDiffusionError(
                    f"{os.path.join(folder, name)} is not an image EriDiffusion reads "
                    f"(supported: {_SUPPORTED}, clips: {_SUPPORTED_CLIPS}); move it out of "
                    "the folder or convert it to png/jpg/webp."
                )
    if not has_metadata:  # metadata.jsonl names the folders it wants
        images += frame_folders
    for name, stray in loose_folders.items():
        if name in caption_files:  # captioned, so meant as a clip
            raise EriDiffusionError(
                f"{os.path.join(folder, name, stray)} is not a frame of the frame folder "
                f"{os.path.join(folder, name)} ({_SUPPORTED} images only); move it out."
            )
    return images, caption_files, has_metadata, reference_folder, mask_folder


def _read_caption_files(folder, images, caption_files, caption_ext):
    by_stem = {}
    for name in images:
        stem = _stem(folder, name)
        if stem in by_stem:
            raise EriDiffusionError(
                f"{os.path.join(folder, by_stem[stem])} and {os.path.join(folder, name)} "
                f"share the name '{stem}', so {stem}{caption_ext} would caption both; "
                "rename one of them."
            )
        by_stem[stem] = name
    for stem, caption_name in caption_files.items():
        if stem not in by_stem:
            raise EriDiffusionError(
                f"{os.path.join(folder, caption_name)} has no image beside it "
                f"(expected {stem}.png, .jpg or .webp, a {stem}.mp4 clip or a {stem}/ "
                "frame folder); add the image or delete the caption file."
            )
    captions = {}
    for stem, caption_name in caption_files.items():
        path = os.path.join(folder, caption_name)
        try:
            with open(path, encoding="utf-8-sig") as file:  # -sig: a byte-order mark is not caption text
                captions[by_stem[stem]] = file.read().strip()
        except UnicodeDecodeError:
            raise EriDiffusionError(f"{path} is not UTF-8 text; re-save it as UTF-8.") from None
    return captions


def _read_metadata(folder, images):
    """{relative image path: caption} from metadata.jsonl (Hugging Face imagefolder style: one
    object per line with file_name and text or caption). Listed files in subfolders are allowed,
    and added to `images`, since naming them there is explicit."""
    path = os.path.join(folder, METADATA_FILE)
    captions, first_line = {}, {}
    try:
        with open(path, encoding="utf-8-sig") as file:
            lines = file.read().splitlines()
    except UnicodeDecodeError:
        raise EriDiffusionError(f"{path} is not UTF-8 text; re-save it as UTF-8.") from None
    example = '{"file_name": "00.jpg", "text": "a photo of sks dog"}'
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as error:
            raise EriDiffusionError(
                f"{where} is not valid JSON ({error.msg}); write one object per line such as {example}."
            ) from None
        if not isinstance(entry, dict) or not isinstance(entry.get("file_name"), str):
            raise EriDiffusionError(
                f'{where} has no "file_name" text field; write one object per line such as {example}.'
            )
        caption = entry.get("text", entry.get("caption", ""))
        if not isinstance(caption, str):
            raise EriDiffusionError(f"{where}: the caption must be text, got {caption!r}; write it as a JSON string.")
        name = os.path.normpath(entry["file_name"]).replace(os.sep, "/")
        if os.path.isabs(name) or name.startswith("../") or name == "..":
            raise EriDiffusionError(
                f"{where} names {entry['file_name']}, outside the dataset folder; "
                "give a path relative to the folder holding metadata.jsonl."
            )
        is_frame_folder = os.path.isdir(os.path.join(folder, name))
        if os.path.splitext(name.lower())[1] not in IMAGE_EXTENSIONS + VIDEO_EXTENSIONS and not is_frame_folder:
            raise EriDiffusionError(
                f"{where} names {entry['file_name']}, which is not a {_SUPPORTED} "
                f"image, a {_SUPPORTED_CLIPS} clip or a frame folder; convert it or "
                "remove the line."
            )
        if not is_frame_folder and not os.path.isfile(os.path.join(folder, name)):
            raise EriDiffusionError(
                f"{where} names {entry['file_name']}, which is not in {folder}; add the image or remove the line."
            )
        if name in first_line:
            raise EriDiffusionError(
                f"{where} names {entry['file_name']} again (first on line {first_line[name]}); keep one line per image."
            )
        first_line[name] = number
        captions[name] = caption.strip()
        if name not in images:
            images.append(name)
    return captions


def _images_by_stem(where, what, both):
    """{stem relative to `where`: image path} of the images in the side folder `where` (references,
    masks); a file that is no image or a second image of one stem is an error naming it ("is not
    {what} EriDiffusion reads", "are both {both} '<stem>'")."""
    by_stem = {}
    for root, _, files in os.walk(where):
        for file in sorted(files):
            if file.startswith("."):
                continue
            path = os.path.join(root, file)
            if os.path.splitext(file.lower())[1] not in IMAGE_EXTENSIONS:
                raise EriDiffusionError(
                    f"{path} is not {what} EriDiffusion reads (supported: {_SUPPORTED}); move it out of {where} "
                    "or convert it."
                )
            stem = os.path.splitext(os.path.relpath(path, where).replace(os.sep, "/"))[0]
            if stem in by_stem:
                raise EriDiffusionError(f"{by_stem[stem]} and {path} are both {both} '{stem}'; keep one of them.")
            by_stem[stem] = path
    return by_stem


def _references(folder, reference_folder, images):
    """{target name: path of its reference image} from the reference folder, which must hold exactly
    one image per target, under the target's stem (a target in a subfolder: the same subfolder)."""
    where = os.path.join(folder, reference_folder)
    by_stem = _images_by_stem(where, "a reference image", "references for")
    references = {}
    for name in images:
        path = os.path.join(folder, name)
        stem = os.path.splitext(name)[0]
        if os.path.isdir(path) or is_clip_file(name):
            raise EriDiffusionError(
                f"{path} is a clip, but {where} makes this an edit-pair dataset of still "
                "images; move the clip to its own dataset folder."
            )
        if stem not in by_stem:
            raise EriDiffusionError(
                f"{path} has no reference image: put the image it was edited from in "
                f"{where} as {stem}.png (or .jpg/.webp), or move {name} out of the dataset."
            )
        references[name] = by_stem.pop(stem)
    if by_stem:
        stem, path = min(by_stem.items())
        raise EriDiffusionError(
            f"{path} is a reference for '{stem}', but the dataset has no image {stem}; "
            f"add the target image beside {where} or delete the reference."
        )
    for path in references.values():
        open_image_rgb(path)  # proves it is readable now rather than at caching time
    return references


def _masks(folder, mask_folder, images, missing_mask):
    """{image name: path of its mask} from the mask folder: one mask per image under the image's stem
    (an image in a subfolder: the same subfolder); an image without one is an error unless
    `missing_mask` is "weight_1", a mask without an image always is."""
    where = os.path.join(folder, mask_folder)
    by_stem = _images_by_stem(where, "a mask image", "masks of")
    masks = {}
    for name in images:
        path = os.path.join(folder, name)
        if os.path.isdir(path) or is_clip_file(name):
            raise EriDiffusionError(
                f"{path} is a clip, but {where} holds loss masks, which are for still images; move the "
                "clip to a dataset folder without masks/."
            )
        stem = os.path.splitext(name)[0]
        if stem in by_stem:
            masks[name] = by_stem.pop(stem)
        elif missing_mask == "error":
            raise EriDiffusionError(
                f"{path} has no mask: put one in {where} as {stem}.png (white: learn, black: ignore), or "
                "set missing_mask to 'weight 1' to train on such images everywhere."
            )
    if by_stem:
        stem, path = min(by_stem.items())
        raise EriDiffusionError(
            f"{path} is a mask for '{stem}', but the dataset has no image {stem}; add the image or delete the mask."
        )
    return masks


def open_mask(path):
    """The mask at `path` as an 8-bit greyscale PIL image, upright by its own EXIF orientation;
    transparent parts count as black (ignored)."""
    image = _open_upright(path, "mask ", "put it back or reload the dataset", "re-export it as a greyscale png.")
    if image.mode in _WIDE_GRAY_MODES:
        return _eight_bit_gray(image)
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        black = Image.new("RGBA", image.size, (0, 0, 0, 255))
        return Image.alpha_composite(black, image.convert("RGBA")).convert("L")
    return image.convert("L")


def check_mask_fits(mask_path, image_path, size):
    """A mask must have its image's aspect ratio (as the image is shown: after EXIF orientation); a
    mask of another size is scaled to the image's."""
    mask = open_mask(mask_path)
    width, height = size
    if abs(mask.width * height - mask.height * width) > 0.01 * width * mask.height:
        raise EriDiffusionError(
            f"mask {mask_path} is {mask.width}x{mask.height}, but its image {image_path} is {width}x{height} "
            "(as shown, after its EXIF orientation): export the mask at the image's size."
        )


def _stem(folder, name):
    """The name a caption file takes after: a file's name less its extension, a frame folder's name."""
    return name if os.path.isdir(os.path.join(folder, name)) else os.path.splitext(name)[0]


def _with_trigger(caption, trigger_word):
    if not trigger_word:
        return caption
    if re.search(rf"(?<!\w){re.escape(trigger_word)}(?!\w)", caption, flags=re.IGNORECASE):
        return caption
    return f"{trigger_word}, {caption}"


def media_sha256(path):
    """sha256 digest of an image's or clip's bytes, or of a frame folder's frame names and bytes in order."""
    if not os.path.isdir(path):
        return _file_sha256(path)
    digest = hashlib.sha256()
    for name in frame_folder_files(path)[0]:
        digest.update(_length_prefixed(name.encode()))
        digest.update(_file_sha256(os.path.join(path, name)))
    return digest.digest()


def _file_sha256(path):
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as file:
            for chunk in iter(lambda: file.read(1 << 20), b""):
                digest.update(chunk)
    except FileNotFoundError:
        raise EriDiffusionError(
            f"{path} was removed after the dataset was loaded; put it back or reload the dataset."
        ) from None
    return digest.digest()


def _length_prefixed(data):
    return len(data).to_bytes(8, "little") + data
