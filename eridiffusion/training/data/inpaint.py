"""Masks fitted to their image's bucket: as loss weights on the latent grid, and for inpainting
models as InpaintModelConditioning's inputs (the image with the masked region grayed out, encoded,
beside the mask)."""

import numpy as np
import torch
from PIL import Image

from .buckets import fit_to_bucket
from .media import mirrored, open_mask


def fitted_mask(record, bucket, mirror=False):
    """The mask of `record` (8-bit PIL) scaled to the image's size, flipped with it (`mirror`),
    resized and cropped into the bucket exactly as the image is (fit_to_bucket); without a mask, all
    white."""
    if not record.mask:
        return Image.new("L", tuple(bucket), 255)
    mask = open_mask(record.mask)
    if mask.size != (record.width, record.height):
        mask = mask.resize((record.width, record.height), Image.Resampling.BILINEAR)
    return fit_to_bucket(mirrored(mask, mirror), bucket)[0]


def _pixels(mask):
    return torch.from_numpy(np.asarray(mask, dtype=np.float32) / 255.0)[None]


def mask_on_latent_grid(record, bucket, grid, mirror=False):
    """The (1, h, w) loss mask of `record` on its latent's grid in [0, 1]: fitted_mask averaged over
    each latent cell."""
    pixels = _pixels(fitted_mask(record, bucket, mirror))[None]
    return torch.nn.functional.interpolate(pixels, size=tuple(grid), mode="area")[0]


def inpaint_inputs(cache, record, bucket, mirror=False):
    """(latent of the image with its mask's region grayed out, the mask (1, H, W) in [0, 1]) of
    `record` in `bucket`: what InpaintModelConditioning gives an inpainting model as
    concat_latent_image and concat_mask."""
    mask = fitted_mask(record, bucket, mirror)
    return cache.masked_latent(record.path, bucket, mask, mirror), _pixels(mask)
