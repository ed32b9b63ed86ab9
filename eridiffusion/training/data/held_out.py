"""Which records of a dataset are held out of training to measure the validation loss."""

from ...errors import EriDiffusionError
from ...settings import check_declared
from .dataset_settings import DatasetSettings


def held_out_indices(count, fraction, folder):
    """Indices of the `fraction` of `count` name-sorted records held out for validation, spread
    evenly over the names: no randomness, so a folder always splits the same way."""
    check_declared(DatasetSettings, "LoadDataset", validation=fraction)
    if fraction == 0:
        return set()
    held = max(1, round(count * fraction))
    if held >= count:
        raise EriDiffusionError(
            f"{folder} has {count} image(s): holding out a validation fraction of {fraction} leaves none "
            "to train on; add images, or connect a separate validation folder to CacheLatents instead."
        )
    return {int((i + 0.5) * count / held) for i in range(held)}
