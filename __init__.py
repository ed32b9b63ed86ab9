"""EriDiffusion: train LoRA-family adapters inside the ComfyUI graph.

Importing this package touches nothing of ComfyUI; the host loads the nodes through
`comfy_entrypoint` (ComfyUI's V3 extension API).
"""
__version__ = "0.1.0"

WEB_DIRECTORY = "./web"


async def comfy_entrypoint():
    from .nodes.extension import EriDiffusionExtension
    return EriDiffusionExtension()
