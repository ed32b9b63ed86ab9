"""Every family's tiny stack by name: SD1.5 and SDXL from eridiffusion.tiny_models, the others from the
devkit.tiny_<family> modules (each on tiny_stack), each with the short run that shows it learns, and
the ComfyUI hosts they run on. Import once ComfyUI is on sys.path."""

from devkit import (
    tiny_ace_step,
    tiny_auraflow,
    tiny_chroma,
    tiny_cogvideox,
    tiny_cosmos_predict2,
    tiny_ernie_image,
    tiny_flux,
    tiny_flux2,
    tiny_hidream,
    tiny_hidream_o1,
    tiny_hunyuan_dit,
    tiny_hunyuan_image,
    tiny_hunyuan_video,
    tiny_ideogram4,
    tiny_joyimage,
    tiny_kandinsky5,
    tiny_krea2,
    tiny_lens,
    tiny_ltx,
    tiny_lumina2,
    tiny_mochi,
    tiny_omnigen2,
    tiny_pixart,
    tiny_pixeldit,
    tiny_qwen_image,
    tiny_sd3,
    tiny_unets,
    tiny_wan,
    tiny_z_image,
)
from devkit.tiny_stack import TinyFamily
from eridiffusion.errors import EriDiffusionError
from eridiffusion.tiny_models import tiny_sd15, tiny_sdxl

# The ComfyUI versions CI runs the suite on (scripts/hosts/), oldest first.
TESTED_HOSTS = ("0.3.75", "0.28.0")

# The modules of the families, images first, then video, then audio.
FAMILY_MODULES = (
    tiny_unets,
    tiny_sd3,
    tiny_flux,
    tiny_chroma,
    tiny_flux2,
    tiny_qwen_image,
    tiny_hidream,
    tiny_hidream_o1,
    tiny_lumina2,
    tiny_z_image,
    tiny_omnigen2,
    tiny_hunyuan_image,
    tiny_hunyuan_dit,
    tiny_auraflow,
    tiny_pixart,
    tiny_kandinsky5,
    tiny_ernie_image,
    tiny_cosmos_predict2,
    tiny_krea2,
    tiny_joyimage,
    tiny_ideogram4,
    tiny_lens,
    tiny_pixeldit,
    tiny_wan,
    tiny_ltx,
    tiny_hunyuan_video,
    tiny_cogvideox,
    tiny_mochi,
    tiny_ace_step,
)

TINY_FAMILIES = {"sd15": TinyFamily(tiny_sd15, family="SD 1.5"), "sdxl": TinyFamily(tiny_sdxl, family="SDXL")}
for _module in FAMILY_MODULES:
    TINY_FAMILIES.update(_module.FAMILIES)


def version_key(version):
    return tuple(int(part) for part in version.split("."))


def hosts_running(family):
    """The tested hosts a tiny family runs on: those from its `since` on."""
    return [h for h in TESTED_HOSTS if version_key(h) >= version_key(family.since)]


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
