"""SampleDuringTraining: prompts and sampler settings → SAMPLE_CONFIG for the trainer."""

from typing import Any

from comfy_api.latest import io

from ..training.run.samples import SamplerSettings, SampleSettings, check_sample_size
from ..training.settings import settings_of
from . import sockets
from .setting_inputs import inputs_for
from .sockets import CATEGORY


def encode(clip, text):
    return clip.encode_from_tokens_scheduled(clip.tokenize(text))


class SampleDuringTraining(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_SampleDuringTraining",
            display_name="SampleDuringTraining",
            category=CATEGORY,
            description="Images rendered from the model being trained, every N steps.",
            inputs=[
                io.Clip.Input("clip", tooltip="Encodes the prompts."),
                io.Vae.Input("vae", tooltip="Decodes the samples."),
                *inputs_for(settings_of(SamplerSettings)),
            ],
            outputs=[sockets.SampleConfig.Output(display_name="sample_config", tooltip="Connect to LoRATrainer.")],
        )

    @classmethod
    def execute(cls, clip: Any, vae: Any, **values: Any) -> io.NodeOutput:
        settings = SamplerSettings(**values)
        check_sample_size(vae, settings.width, settings.height)
        lines = settings.prompt_lines()
        sample_settings = SampleSettings(
            prompts=lines,
            positives=tuple(encode(clip, p) for p in lines),
            negative=encode(clip, ""),
            vae=vae,
            every=settings.every,
            seed=settings.seed,
            steps=settings.steps,
            cfg=settings.cfg,
            sampler=settings.sampler_name,
            scheduler=settings.scheduler,
            width=settings.width,
            height=settings.height,
            frames=settings.frames,
        )
        return io.NodeOutput(sample_settings)
