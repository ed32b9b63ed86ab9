"""Edit references named in metadata.jsonl: a "control" (and "control_2", "control_3") column gives
each target's reference images by path, relative to the dataset folder, instead of control/
subfolders."""

import json
import os
import re

from ...errors import EriDiffusionError
from .folder_scan import METADATA_FILE, SUPPORTED_IMAGES
from .media import IMAGE_EXTENSIONS, open_image_rgb

COLUMNS = ("control", "control_2", "control_3")
# other columns that name a reference (control_4, ctrl_img, reference ...), which would be ignored
_LIKE_REFERENCE = re.compile(r"(control|ctrl|reference)s?(_?(img|image))?(_?\d+)?")


def metadata_references(folder, images):
    """{target name: (its reference paths, in column order)} from metadata.jsonl's control columns,
    or {} when no line has one. Every target then names the same columns, each an image inside the
    folder."""
    path = os.path.join(folder, METADATA_FILE)
    with open(path, encoding="utf-8-sig") as file:  # (read_metadata has checked every line)
        entries = [(n, json.loads(line)) for n, line in enumerate(file.read().splitlines(), start=1) if line.strip()]
    for number, entry in entries:
        unread = sorted(key for key in entry if _LIKE_REFERENCE.fullmatch(key.lower()) and key not in COLUMNS)
        if unread:
            raise EriDiffusionError(
                f"{path} line {number} names {unread[0]}, which is not read: a target's references go in the "
                f"columns {', '.join(COLUMNS)} (three at most, as the edit models take them); rename or remove it."
            )
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
