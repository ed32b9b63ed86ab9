"""Tiny model configs the way the installed ComfyUI reads a checkpoint: each family is described by
the few state-dict keys (at tiny shapes) that `comfy.model_detection` looks at; the host's own
detection turns them into a config, and its model list picks the supported_models class, as for a
real file. Only the sizes detection hard-codes (head counts, rope axes) are then cut down. A field a
newer ComfyUI adds to a family's parameters therefore comes from that ComfyUI's own detection."""

import comfy.model_detection
import torch

from eridiffusion.errors import EriDiffusionError


def blocks(prefix, count, suffix="weight"):
    """Layout entries that make detection count `count` blocks under `prefix` (`<prefix>.<i>.…`)."""
    return {f"{prefix}.{i}.{suffix}": (1,) for i in range(count)}


def detected_model_config(layout, shrink=None, expected_class=None, refit=None):
    """The supported_models config ComfyUI detects for a state dict of `layout` ({key: shape}),
    with `shrink` (config values) laid over what detection hard-codes for the full-size model.
    `expected_class` (a name) guards against the layout being read as another family. `refit`: values
    set on the matched class's config afterwards, for a class that ComfyUI tells apart by a full-size
    width alone (the model is then built at the tiny width)."""
    state_dict = {key: torch.zeros(shape) for key, shape in layout.items()}
    unet_config = comfy.model_detection.detect_unet_config(state_dict, "")
    if unet_config is None:
        raise EriDiffusionError(f"this ComfyUI's model detection recognises no model in the layout {sorted(layout)}")
    unet_config.update(shrink or {})
    model_config = comfy.model_detection.model_config_from_unet_config(unet_config, state_dict)
    if model_config is None:
        raise EriDiffusionError(f"no model class of this ComfyUI matches the detected config {unet_config}")
    if expected_class is not None and type(model_config).__name__ != expected_class:
        raise EriDiffusionError(f"the layout was detected as {type(model_config).__name__}, not {expected_class}")
    model_config.unet_config.update(refit or {})
    return model_config
