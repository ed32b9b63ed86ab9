"""EriDiffusion as a ComfyUI custom node: ComfyUI imports this folder and calls `comfy_entrypoint`
(its V3 extension API). The code lives in the `eridiffusion` package beside this file."""

WEB_DIRECTORY = "./web"


async def comfy_entrypoint():
    from .eridiffusion.nodes.extension import EriDiffusionExtension

    return EriDiffusionExtension()
