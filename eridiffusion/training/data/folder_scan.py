"""Scanning a dataset folder: which files are images, clips and frame folders, their caption files
(metadata.jsonl is read in metadata_jsonl.py), and the edit references and loss masks in its side folders;
anything the user may have meant to train on and that cannot be read is an error naming it."""

import os
import re

from ...errors import EriDiffusionError
from .audio import AUDIO_EXTENSIONS, SUPPORTED_AUDIO, is_audio_file
from .audio_captions import SIDECAR_SUFFIXES
from .media import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, frame_folder_files, is_clip_file, open_image_rgb

METADATA_FILE = "metadata.jsonl"


# Edit-pair datasets (Flux Kontext, Qwen-Image Edit): a subfolder of this name holds, for each
# target image, the reference image it was edited from under the same stem (ai-toolkit's and
# musubi-tuner's control images).
REFERENCE_FOLDERS = ("control", "reference")
# A second and third reference per target (multi-reference edit models: Qwen-Image-Edit 2509+,
# Flux.2), in the order the model is shown them.
MORE_REFERENCE_FOLDERS = ("control_2", "control_3")


# A subfolder of this name holds loss masks: for an image, a greyscale image of the same stem (white:
# learn, black: ignore, grey: in between), fitted to the image's bucket exactly as the image is.
MASK_FOLDER = "masks"
# Side folders named almost as these (a fourth reference, a singular or plural off): read as they are
# named they would turn into a clip; the one they were likely meant as is named instead.
NEAR_SIDE_FOLDERS = {"mask": "masks", "controls": "control", "references": "reference", "ctrl": "control"}
_NUMBERED_REFERENCES = re.compile(r"(control|reference|ctrl)_?\d+")


SUPPORTED_IMAGES = ", ".join(ext[1:] for ext in IMAGE_EXTENSIONS)


SUPPORTED_CLIPS = ", ".join(ext[1:] for ext in VIDEO_EXTENSIONS)


def no_caption_error(folder, name, caption_ext, has_metadata, empty):
    """The error for an image (clip) whose caption is missing, or present but empty."""
    path = os.path.join(folder, name)
    what = " (a frame folder, read as one clip)" if os.path.isdir(path) else ""
    option = "or set missing_caption to 'use trigger word' to caption it with the trigger word."
    caption_file = os.path.join(folder, caption_stem(folder, name) + caption_ext)
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
    if not has_metadata and os.path.isdir(caption_file):
        where = f"{caption_file} is a folder, not a caption file: rename it and write the caption in a file"
    return EriDiffusionError(f"{path}{what} has no caption; {where}, {option}")


def normalize_caption_ext(caption_ext):
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


def scan_folder(folder, caption_ext):
    """Image, clip, frame-folder and audio names, {stem: caption file name}, whether metadata.jsonl is
    present, the reference and mask folders' names (or None) and, in a folder of audio files, their
    sidecar files (lyrics, ACE-Step captions and annotations); any other visible file is an error so
    nothing the user meant to train on is skipped silently."""
    with os.scandir(folder) as entries:
        listed = sorted(entries, key=lambda e: e.name)
    scan = FolderScan(folder, caption_ext, audio=any(is_audio_file(entry.name) for entry in listed))
    for entry in listed:
        if entry.name.startswith("."):
            continue
        if _is_dir(entry):
            scan.subfolder(entry)
        else:
            scan.file(entry.name)
    if not scan.has_metadata:  # metadata.jsonl names the folders it wants
        scan.images += scan.frame_folders
    for name, stray in scan.loose_folders.items():
        if name in scan.caption_files:  # captioned, so meant as a clip
            raise EriDiffusionError(
                f"{os.path.join(folder, name, stray)} is not a frame of the frame folder "
                f"{os.path.join(folder, name)} ({SUPPORTED_IMAGES} images only); move it out."
            )
    return scan


def check_sidecars(folder, scan):
    """Every lyrics, caption or annotation file of an audio folder belongs to an audio file of its stem."""
    stems = {os.path.splitext(name)[0] for name in scan.images if is_audio_file(name)}
    for name in scan.sidecars:
        suffix = next(s for s in SIDECAR_SUFFIXES if name.lower().endswith(s))
        if name[: -len(suffix)] not in stems:
            raise EriDiffusionError(
                f"{os.path.join(folder, name)} has no audio file beside it (expected {name[: -len(suffix)]}.flac, "
                f".wav, .mp3 or .ogg); add the audio file or delete it."
            )


def near_side_folder_error(path, name):
    meant = NEAR_SIDE_FOLDERS.get(name.lower())
    if meant == MASK_FOLDER:
        return EriDiffusionError(f"{path} is not read: loss masks go in {MASK_FOLDER}/; rename it to {MASK_FOLDER}.")
    return EriDiffusionError(
        f"{path} is not read: a target's edit references go in control/ (or reference/), then control_2/ and "
        "control_3/ (three at most, as the edit models take them); rename it to one of those, or move it out of "
        "the dataset folder."
    )


def _is_dir(entry):
    """Whether a folder entry is a folder; a symbolic link that loops is an error naming it."""
    try:
        return entry.is_dir()
    except OSError as error:
        raise EriDiffusionError(
            f"{entry.path} is a symbolic link that cannot be followed ({error.strerror}); remove it or point it at "
            "a file."
        ) from None


class FolderScan:
    """What scan_folder has found so far."""

    def __init__(self, folder, caption_ext, audio=False):
        self.folder, self.caption_ext, self.audio, self.sidecars = folder, caption_ext, audio, []
        self.images, self.frame_folders, self.caption_files, self.has_metadata = [], [], {}, False
        self.reference_folder = self.mask_folder = None
        self.more_reference_folders = {}  # {"control_2": its name as written, ...}
        self.loose_folders = {}  # subfolders holding other things than frames: clips only when captioned

    def subfolder(self, entry):
        name = entry.name
        if name.lower() in REFERENCE_FOLDERS:
            if self.reference_folder is not None:
                raise EriDiffusionError(
                    f"{self.folder} has both {self.reference_folder}/ and {name}/ reference "
                    "folders; keep the reference images in one of them."
                )
            self.reference_folder = name
        elif name.lower() in MORE_REFERENCE_FOLDERS:
            self.more_reference_folders[name.lower()] = name
        elif name.lower() == MASK_FOLDER:
            self.mask_folder = name
        elif name.lower() in NEAR_SIDE_FOLDERS or _NUMBERED_REFERENCES.fullmatch(name.lower()):
            raise near_side_folder_error(entry.path, name)
        else:
            frames, others = frame_folder_files(entry.path)
            if frames and not others:
                self.frame_folders.append(name)  # one clip
            elif frames:
                self.loose_folders[name] = others[0]
            # (other subfolders are not read: rejects, backups)

    def file(self, name):
        lowered, path, ext = name.lower(), os.path.join(self.folder, name), self.caption_ext
        if name == METADATA_FILE:
            self.has_metadata = True
        elif os.path.splitext(lowered)[1] in IMAGE_EXTENSIONS + VIDEO_EXTENSIONS + AUDIO_EXTENSIONS:
            self.images.append(name)
        elif self.audio and lowered.endswith(SIDECAR_SUFFIXES):
            self.sidecars.append(name)
        elif lowered.endswith(ext.lower()) and len(name) > len(ext):
            stem = name[: -len(ext)]
            if stem in self.caption_files:
                raise EriDiffusionError(
                    f"{path} and {self.caption_files[stem]} both caption '{stem}'; delete one of them."
                )
            self.caption_files[stem] = name
        elif lowered in ("metadata.csv", "metadata.json", "metadata.parquet"):
            raise EriDiffusionError(
                f"{path}: EriDiffusion reads captions from {METADATA_FILE} (one JSON object per line with "
                "file_name and text); convert it to that or to one caption file per image."
            )
        elif os.path.splitext(lowered)[1] in CAPTION_LIKE:
            raise EriDiffusionError(
                f"{path} looks like a caption file, but caption_ext is '{ext}': set caption_ext to "
                f"'{os.path.splitext(name)[1]}' if the captions are in these files, or move it out of the folder."
            )
        else:
            raise EriDiffusionError(
                f"{path} is not an image EriDiffusion reads (supported: {SUPPORTED_IMAGES}, clips: "
                f"{SUPPORTED_CLIPS}, audio: {SUPPORTED_AUDIO}); move it out of the folder or convert it to "
                "png/jpg/webp."
            )


# Extensions other trainers' captions use (kohya .txt/.caption, some .md): a hint when caption_ext is another.
CAPTION_LIKE = (".txt", ".caption", ".md", ".cap", ".tags")


def read_caption_files(folder, images, caption_files, caption_ext):
    by_stem: dict[str, str] = {}  # {caption stem: image name}
    for name in images:
        stem = caption_stem(folder, name)
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


def _images_by_stem(where, what, both):
    """{stem relative to `where`: image path} of the images in the side folder `where` (references,
    masks); a file that is no image or a second image of one stem is an error naming it ("is not
    {what} EriDiffusion reads", "are both {both} '<stem>'")."""
    by_stem: dict[str, str] = {}
    for root, _, files in os.walk(where):
        for file in sorted(files):
            if file.startswith("."):
                continue
            path = os.path.join(root, file)
            if os.path.splitext(file.lower())[1] not in IMAGE_EXTENSIONS:
                raise EriDiffusionError(
                    f"{path} is not {what} EriDiffusion reads (supported: {SUPPORTED_IMAGES}); move it out of {where} "
                    "or convert it."
                )
            stem = os.path.splitext(os.path.relpath(path, where).replace(os.sep, "/"))[0]
            if stem in by_stem:
                raise EriDiffusionError(f"{by_stem[stem]} and {path} are both {both} '{stem}'; keep one of them.")
            by_stem[stem] = path
    return by_stem


def references_of(folder, reference_folder, images):
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


def all_references_of(folder, scan, images):
    """{target name: (its reference paths, in order)} of control/ (or reference/), control_2/ and
    control_3/; a later folder without the earlier ones is an error naming the folder to add."""
    wanted = [scan.reference_folder] + [scan.more_reference_folders.get(name) for name in MORE_REFERENCE_FOLDERS]
    while wanted and wanted[-1] is None:
        wanted.pop()
    if None in wanted:
        present = next(name for name in reversed(wanted) if name is not None)
        missing = (REFERENCE_FOLDERS[0],) + MORE_REFERENCE_FOLDERS
        raise EriDiffusionError(
            f"{os.path.join(folder, present)} holds later references, but {folder} has no "
            f"{missing[wanted.index(None)]}/ folder: references are read in order (control/, control_2/, control_3/); "
            "rename the folders so none is skipped."
        )
    found = [references_of(folder, where, images) for where in wanted]
    return {name: tuple(references[name] for references in found) for name in (found[0] if found else {})}


def masks_of(folder, mask_folder, images, missing_mask):
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


def caption_stem(folder, name):
    """The name a caption file takes after: a file's name less its extension, a frame folder's name."""
    return name if os.path.isdir(os.path.join(folder, name)) else os.path.splitext(name)[0]
