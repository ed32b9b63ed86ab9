"""Masked datasets made from the real photos: a copy of some images and a mask for each."""

import os
import shutil

import numpy as np
from PIL import Image

from eridiffusion.training.data.media import open_image_rgb

IMAGES = ("00", "01")


def copy_photos(datasets_dir, folder, names=IMAGES):
    os.makedirs(folder, exist_ok=True)
    for name in names:
        for ext in (".jpg", ".txt"):
            shutil.copy(os.path.join(datasets_dir, "dreambooth_dog", name + ext), folder)
    return folder


def half_black_masks(folder, names=IMAGES):
    """masks/<name>.png: the left half of each (upright) image black, the right half white."""
    os.makedirs(os.path.join(folder, "masks"), exist_ok=True)
    for name in names:
        width, height = open_image_rgb(os.path.join(folder, name + ".jpg")).size
        mask = np.full((height, width), 255, dtype=np.uint8)
        mask[:, : width // 2] = 0
        Image.fromarray(mask).save(os.path.join(folder, "masks", name + ".png"))
