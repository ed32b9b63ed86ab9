"""TinyDemoModel: a clearly labelled random-weight model for trying the graph without a checkpoint."""

from comfy_api.latest import io

from ..training.model.tiny_models import TINY_BUILDERS, build_tiny_demo
from .types import CATEGORY


class TinyDemoModel(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_TinyDemoModel",
            display_name="Tiny demo model (random weights)",
            category=f"{CATEGORY}/demo",
            description="A tiny SD1.5- or SDXL-architecture MODEL, CLIP and VAE with random weights, built from "
            "ComfyUI's own classes. It draws noise: it exists to test a training graph in seconds.",
            inputs=[
                io.Combo.Input(
                    "architecture",
                    options=list(TINY_BUILDERS),
                    default="sdxl",
                    tooltip="Which ComfyUI model class to shrink.",
                ),
                io.Int.Input(
                    "seed",
                    default=0,
                    min=0,
                    max=0xFFFFFFFF,
                    control_after_generate=False,
                    tooltip="Seed of the random weights.",
                ),
            ],
            outputs=[
                io.Model.Output(display_name="model"),
                io.Clip.Output(display_name="clip"),
                io.Vae.Output(display_name="vae"),
            ],
        )

    @classmethod
    def execute(cls, architecture, seed):
        return io.NodeOutput(*build_tiny_demo(architecture, seed))
