"""Aspect-ratio buckets: the training sizes for a resolution, the bucket an image belongs in,
and the resize-and-center-crop that puts it there."""

import functools
import math

from PIL import Image

from ...errors import EriDiffusionError


def bucket_sizes(resolution, step=64, max_aspect=4.0):
    """(width, height) pairs with both sides multiples of `step`, area at most resolution**2 and
    neither side able to grow by a step without passing it, aspect ratio within
    1/max_aspect..max_aspect; sorted from tallest to widest. Holds (resolution, resolution)."""
    return list(_bucket_sizes(resolution, step, max_aspect))


def bucket_for(width, height, resolution, step=64, max_aspect=4.0):
    """The bucket whose aspect ratio is closest to width:height in log space (so 2:1 and 1:2 are
    equally far from square); on a tie the larger bucket."""
    if (
        isinstance(width, bool)
        or isinstance(height, bool)
        or not isinstance(width, int)
        or not isinstance(height, int)
        or width < 1
        or height < 1
    ):
        raise EriDiffusionError(
            f"image size {width!r}x{height!r} is not a positive whole-pixel size; "
            "pass the image's width and height in pixels."
        )
    target = math.log(width / height)
    return min(
        _bucket_sizes(resolution, step, max_aspect),
        key=lambda size: (abs(math.log(size[0] / size[1]) - target), -size[0] * size[1]),
    )


def fit_to_bucket(image, bucket):
    """Resize `image` (LANCZOS) to the smallest size covering `bucket`, then center-crop to it.
    Returns the cropped image and the crop box (left, top, right, bottom) in resized-image pixels,
    which SDXL-style models take as crop conditioning."""
    resized_size, box = crop_to_bucket(image.size, bucket)
    if resized_size != image.size:
        image = image.resize(resized_size, Image.Resampling.LANCZOS)
    return image.crop(box), box


def crop_to_bucket(size, bucket):
    """(resized size, crop box) that fit_to_bucket uses for an image of `size` (width, height):
    known without decoding, so a clip's cache key needs none of its frames."""
    bucket_width, bucket_height = bucket
    width, height = size
    scale = max(bucket_width / width, bucket_height / height)
    # max() guards against rounding leaving the resized side one pixel short of the bucket.
    resized_size = (max(bucket_width, round(width * scale)), max(bucket_height, round(height * scale)))
    left = (resized_size[0] - bucket_width) // 2
    top = (resized_size[1] - bucket_height) // 2
    return resized_size, (left, top, left + bucket_width, top + bucket_height)


@functools.lru_cache(maxsize=64)
def _bucket_sizes(resolution, step, max_aspect):
    for name, value in (("resolution", resolution), ("bucket step", step)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise EriDiffusionError(
                f"{name} {value!r} must be a whole number of pixels >= 1; use e.g. resolution 1024 with step 64."
            )
    if resolution % step:
        lower, upper = resolution // step * step, (resolution // step + 1) * step
        raise EriDiffusionError(
            f"resolution {resolution} is not a multiple of the bucket step {step}; use {lower or upper} or {upper}."
        )
    if not max_aspect >= 1.0:
        raise EriDiffusionError(
            f"max_aspect {max_aspect!r} must be >= 1 (width:height of the widest bucket); use e.g. 2.0 or 4.0."
        )
    area = resolution * resolution
    # width**2 <= area * max_aspect bounds the search; the aspect check below is the exact limit.
    widest = area // step
    if math.isfinite(max_aspect):
        widest = min(widest, int(resolution * math.sqrt(max_aspect)) + step)
    sizes = []
    for width in range(step, widest + 1, step):
        height = area // width // step * step  # the tallest height that keeps the area in bound
        if height < step or (width + step) * height <= area:
            continue  # a wider bucket of this height comes closer to the area
        if max(width / height, height / width) <= max_aspect:
            sizes.append((width, height))
    return tuple(sorted(sizes, key=lambda size: size[0] / size[1]))
