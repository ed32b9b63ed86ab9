"""TinyDemoModel: a clearly labelled random-weight model for trying the graph without a checkpoint."""

from typing import Any

from comfy_api.latest import io

from ..settings import settings_of
from ..tiny_models import TinyDemoSettings, build_tiny_demo
from .setting_inputs import inputs_for
from .sockets import CATEGORY


class TinyDemoModel(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_TinyDemoModel",
            display_name="Tiny demo model (random weights)",
            category=f"{CATEGORY}/demo",
            description="A tiny SD1.5- or SDXL-architecture MODEL, CLIP and VAE with random weights, built from "
            "ComfyUI's own classes. It draws noise: it exists to test a training graph in seconds.",
            inputs=inputs_for(settings_of(TinyDemoSettings)),
            outputs=[
                io.Model.Output(display_name="model"),
                io.Clip.Output(display_name="clip"),
                io.Vae.Output(display_name="vae"),
            ],
        )

    @classmethod
    def execute(cls, **values: Any) -> io.NodeOutput:
        settings = TinyDemoSettings(**values)
        return io.NodeOutput(*build_tiny_demo(settings.architecture, settings.seed))
