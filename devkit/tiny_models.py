"""The tiny stacks of every family the tests train (SD1.5 and SDXL from eridiffusion.tiny_models,
the others from tiny_flux, tiny_dit and tiny_video), each with the short run that shows it learns.
Import once ComfyUI is on sys.path."""

from collections.abc import Callable
from dataclasses import dataclass

from eridiffusion.errors import EriDiffusionError
from eridiffusion.tiny_models import tiny_sd15, tiny_sdxl


@dataclass(frozen=True)
class TinyFamily:
    """How to build one family's tiny stack, and the short run that shows it learns."""

    build: Callable  # seed -> (ModelPatcher, CLIP, VAE)
    family: str  # the row of eridiffusion.training.model.families.FAMILIES this stack proves
    steps: int = 200
    learning_rate: float = 3e-3
    resolution: int = 128  # training and sampling size in pixels
    video_frames: int = 0  # > 0: a video model, trained on clips of this many frames
    audio_seconds: float = 0.0  # > 0: an audio model, trained on (and sampling) clips of this many seconds
    start_image: bool = False  # an image-to-video model: trained with CacheLatents' start_image on
    sample_size: tuple = (96, 64)  # width, height of the test renders: not square, so a swapped axis shows
    needs: tuple = ()  # comfy.supported_models classes the stack is built from, where older
    # ComfyUI versions lack them
    since: str = "0.3.75"  # the first tested ComfyUI host that has them (TESTED_HOSTS)
    needs_te: tuple = ()  # comfy.text_encoders.flux builders the stack's text encoder needs (klein_te)
    inpaint: bool = False  # an inpainting model: its data is cached with CacheLatents' inpaint

    def missing_on_host(self):
        """The classes of `needs` (and text encoders of `needs_te`) this ComfyUI lacks (its tests are
        skipped there, with that reason)."""
        import comfy.supported_models
        import comfy.text_encoders.flux

        missing = [f"{name} model class" for name in self.needs if not hasattr(comfy.supported_models, name)]
        te = [f"{name} text encoder" for name in self.needs_te if not hasattr(comfy.text_encoders.flux, name)]
        return missing + te


# The ComfyUI versions CI runs the suite on (scripts/hosts/), oldest first.
TESTED_HOSTS = ("0.3.75", "0.28.0")


def version_key(version):
    return tuple(int(part) for part in version.split("."))


def hosts_running(family):
    """The tested hosts a tiny family runs on: those from its `since` on."""
    return [h for h in TESTED_HOSTS if version_key(h) >= version_key(family.since)]


TINY_FAMILIES = {"sd15": TinyFamily(tiny_sd15, family="SD 1.5"), "sdxl": TinyFamily(tiny_sdxl, family="SDXL")}

from devkit import (  # noqa: E402  (they use the helpers above)
    tiny_audio,
    tiny_dit,
    tiny_edit,
    tiny_flux,
    tiny_hidream_o1,
    tiny_image_2026,
    tiny_image_variants,
    tiny_klein,
    tiny_recent_image,
    tiny_recent_video,
    tiny_unets,
    tiny_video,
    tiny_video_2026,
    tiny_video_i2v,
)

for _module in (
    tiny_unets,
    tiny_flux,
    tiny_dit,
    tiny_video,
    tiny_recent_image,
    tiny_recent_video,
    tiny_image_2026,
    tiny_image_variants,
    tiny_video_2026,
    tiny_video_i2v,
    tiny_hidream_o1,
    tiny_audio,
    tiny_edit,
    tiny_klein,
):
    TINY_FAMILIES.update(_module.FAMILIES)


def family_params(names):
    """pytest parameters of tiny family `names`, each skipped on a ComfyUI that lacks its classes."""
    import pytest

    from eridiffusion.comfy_compat import host_version

    params = []
    for name in names:
        missing = TINY_FAMILIES[name].missing_on_host()
        reason = f"ComfyUI {host_version()} has no {', '.join(missing)}"
        params.append(pytest.param(name, id=name, marks=pytest.mark.skipif(bool(missing), reason=reason)))
    return params


def build_tiny(arch: str, seed: int = 0):
    """The tiny stack of a family by name ("sd15", "sdxl", "flux_dev", …; see TINY_FAMILIES), or of a
    class that no row names by its ComfyUI name (tiny_unets.GENERIC_STACKS)."""
    if arch in tiny_unets.GENERIC_STACKS:
        return tiny_unets.GENERIC_STACKS[arch](seed)
    if arch not in TINY_FAMILIES:
        known = sorted(TINY_FAMILIES) + sorted(tiny_unets.GENERIC_STACKS)
        raise EriDiffusionError(f"unknown tiny architecture {arch!r}: use one of {known}")
    return TINY_FAMILIES[arch].build(seed)
