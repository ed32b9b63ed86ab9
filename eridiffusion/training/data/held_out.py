"""Which records of a dataset are held out of training to measure the validation loss."""

from ...errors import EriDiffusionError

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
