"""A node for executor tests only: the tiny stack (MODEL, CLIP, VAE) of any family in
devkit.tiny_models, built from ComfyUI's own classes as the demo node builds SD1.5 and
SDXL. register() adds it to the running host's nodes, so a prompt can train any family the way
users run training: through ComfyUI's executor."""

from devkit.tiny_ltx import tiny_ltx2_audio_vae
from devkit.tiny_models import TINY_FAMILIES, build_tiny
from devkit.tiny_unets import GENERIC_STACKS

NODE_NAME = "EriDiffusionTest_TinyFamilyStack"


class TinyFamilyStack:
    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {"family": (sorted(TINY_FAMILIES) + sorted(GENERIC_STACKS),), "seed": ("INT", {"default": 0})}
        }

    RETURN_TYPES = ("MODEL", "CLIP", "VAE")
    FUNCTION = "build"
    CATEGORY = "EriDiffusion/tests"

    def build(self, family, seed):
        return build_tiny(family, seed)


AUDIO_VAE_NODE = "EriDiffusionTest_TinyLTX2AudioVAE"


class TinyLTX2AudioVAE:
    """LTX-2's audio VAE, tiny (devkit.tiny_ltx), as LTXVAudioVAELoader would load it."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"seed": ("INT", {"default": 0})}}

    RETURN_TYPES = ("VAE",)
    FUNCTION = "build"
    CATEGORY = "EriDiffusion/tests"

    def build(self, seed):
        return (tiny_ltx2_audio_vae(seed),)


def register():
    import nodes

    nodes.NODE_CLASS_MAPPINGS.setdefault(NODE_NAME, TinyFamilyStack)
    nodes.NODE_CLASS_MAPPINGS.setdefault(AUDIO_VAE_NODE, TinyLTX2AudioVAE)
    return NODE_NAME
