"""Edit-pair folders made from the real photos, for the edit-model tests: each target photo with up
to three references (control/: its grayscale, control_2/: its mirror image, control_3/: a blurred
copy) and the instruction that turns them into it."""

import os
import shutil

from PIL import Image, ImageFilter, ImageOps

REFERENCE_FOLDERS = ("control", "control_2", "control_3")
INSTRUCTION = "colorize the photo of sks dog"


def _reference(photo, k):
    if k == 0:
        return ImageOps.grayscale(photo).convert("RGB")
    if k == 1:
        return ImageOps.mirror(photo)
    return photo.filter(ImageFilter.GaussianBlur(6))


def make_edit_pairs(photos, folder, stems, references=3):
    """`folder` with the photos `stems` of the folder `photos` as targets, each with `references`
    reference images (control/, control_2/, control_3/ in turn) and its instruction."""
    for where in REFERENCE_FOLDERS[:references]:
        os.makedirs(os.path.join(folder, where), exist_ok=True)
    for stem in stems:
        source = os.path.join(photos, f"{stem}.jpg")
        shutil.copy(source, os.path.join(folder, f"{stem}.jpg"))
        with open(os.path.join(folder, f"{stem}.txt"), "w", encoding="utf-8") as file:
            file.write(INSTRUCTION)
        with Image.open(source) as photo:
            photo = ImageOps.exif_transpose(photo).convert("RGB")
            for k, where in enumerate(REFERENCE_FOLDERS[:references]):
                _reference(photo, k).save(os.path.join(folder, where, f"{stem}.png"))
    return folder
