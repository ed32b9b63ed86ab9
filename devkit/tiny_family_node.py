"""A node for executor tests only: the tiny stack (MODEL, CLIP, VAE) of any family in
devkit.tiny_models, built from ComfyUI's own classes as the demo node builds SD1.5 and
SDXL. register() adds it to the running host's nodes, so a prompt can train any family the way
users run training: through ComfyUI's executor."""

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


def register():
    import nodes

    nodes.NODE_CLASS_MAPPINGS.setdefault(NODE_NAME, TinyFamilyStack)
    return NODE_NAME
