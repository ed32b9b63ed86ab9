"""A dataset's metadata.jsonl (Hugging Face imagefolder style): one JSON object per line naming an image
(file_name) with its caption (text or caption) and, for edit pairs, its reference images by path
(control, control_2, control_3) instead of control/ subfolders."""

import json
import os
import re

from ...errors import EriDiffusionError
from .folder_scan import METADATA_FILE, SUPPORTED_CLIPS, SUPPORTED_IMAGES
from .media import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, open_image_rgb

CAPTION_COLUMNS = ("text", "caption")
COLUMNS = ("control", "control_2", "control_3")  # the reference columns
READ_COLUMNS = ("file_name",) + CAPTION_COLUMNS + COLUMNS
# other columns that name a reference (control_4, ctrl_img, reference ...) or a caption (prompt, tags ...)
_LIKE_REFERENCE = re.compile(r"(control|ctrl|reference)s?(_?(img|image))?(_?\d+)?")
_LIKE_CAPTION = re.compile(r"(prompt|tag|caption|text|description|desc|label|title|alt_?text|instruction)s?(_?\d+)?")


def read_metadata(folder, images):
    """{relative image path: caption} from metadata.jsonl (Hugging Face imagefolder style: one
    object per line with file_name and text or caption). Listed files in subfolders are allowed,
    and added to `images`, since naming them there is explicit."""
    path = os.path.join(folder, METADATA_FILE)
    captions: dict[str, str] = {}
    first_line: dict[str, int] = {}  # {image name: the line that named it}
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
        _check_columns(entry, where)
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
                f"{where} names {entry['file_name']}, which is not a {SUPPORTED_IMAGES} "
                f"image, a {SUPPORTED_CLIPS} clip or a frame folder; convert it or "
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


def _check_columns(entry, where):
    """A metadata.jsonl line names its caption once and only in a column that is read; a column named
    as a caption or a reference under another name would be dropped without a word. (Other columns,
    a dataset's scores or sources, are left alone.)"""
    unread = sorted(key for key in entry if key not in READ_COLUMNS)
    for key in unread:
        if _LIKE_REFERENCE.fullmatch(key.lower()):
            raise EriDiffusionError(
                f"{where} names {key}, which is not read: a target's references go in the columns "
                f"{', '.join(COLUMNS)} (three at most, as the edit models take them); rename or remove it."
            )
        if _LIKE_CAPTION.fullmatch(key.lower()):
            raise EriDiffusionError(
                f"{where} has the column {key!r}, which is not read: an image's caption goes in text (or "
                "caption); rename it to text, or remove it."
            )
    if all(column in entry for column in CAPTION_COLUMNS):
        raise EriDiffusionError(
            f"{where} has both text and caption, and an image has one caption (text would be read, caption "
            "dropped); keep one of the two."
        )


def metadata_references(folder, images):
    """{target name: (its reference paths, in column order)} from metadata.jsonl's control columns,
    or {} when no line has one. Every target then names the same columns, each an image inside the
    folder. (read_metadata has refused columns that are not read.)"""
    path = os.path.join(folder, METADATA_FILE)
    with open(path, encoding="utf-8-sig") as file:  # (read_metadata has checked every line)
        entries = [(n, json.loads(line)) for n, line in enumerate(file.read().splitlines(), start=1) if line.strip()]
    named = [(n, e) for n, e in entries if any(column in e for column in COLUMNS)]
    if not named:
        return {}
    columns = [column for column in COLUMNS if column in named[0][1]]
    if columns != list(COLUMNS[: len(columns)]):
        raise EriDiffusionError(
            f"{path} line {named[0][0]} names {', '.join(columns)}: reference columns go in order "
            f"({', '.join(COLUMNS)}); rename them so none is skipped."
        )
    references = {}
    for number, entry in entries:
        name = os.path.normpath(entry["file_name"]).replace(os.sep, "/")
        if [column for column in COLUMNS if column in entry] != columns:
            raise EriDiffusionError(
                f"{path} line {number} ({entry['file_name']}) does not name the reference columns "
                f"{', '.join(columns)} that line {named[0][0]} does; give every target the same references."
            )
        references[name] = tuple(_reference(folder, entry[c], f"{path} line {number}: {c}") for c in columns)
    missing = sorted(set(images) - set(references))
    if missing:
        raise EriDiffusionError(
            f"{os.path.join(folder, missing[0])} has no line in {path}, whose lines name reference images; "
            "add its line with its references, or move it out of the dataset."
        )
    return references


def _reference(folder, value, where):
    """The path of one reference named `value`: an image file inside `folder`, readable now."""
    if not isinstance(value, str) or not value:
        raise EriDiffusionError(f"{where} must be the path of an image (relative to {folder}), got {value!r}.")
    name = os.path.normpath(value).replace(os.sep, "/")
    full = os.path.join(folder, name)
    if os.path.isabs(name) or name.startswith("../"):
        raise EriDiffusionError(f"{where} names {value}, outside the dataset folder; give a path inside {folder}.")
    if os.path.splitext(name.lower())[1] not in IMAGE_EXTENSIONS:
        raise EriDiffusionError(f"{where} names {value}, which is not a {SUPPORTED_IMAGES} image; convert it.")
    if not os.path.isfile(full):
        raise EriDiffusionError(f"{where} names {value}, which is not in {folder}; add the image or fix the path.")
    open_image_rgb(full)  # readable now rather than at caching time
    return full
