"""SampleDuringTraining: prompts and sampler settings → SAMPLE_CONFIG for the trainer."""

import comfy.samplers
from comfy_api.latest import io

from ..errors import EriDiffusionError
from ..training.run.samples import SampleSettings
from .types import CATEGORY, SampleConfig


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
                io.String.Input(
                    "prompts", multiline=True, default="a photo of sks dog", tooltip="One prompt per line."
                ),
                io.Int.Input(
                    "every", default=100, min=1, max=100000, tooltip="Render every N training steps (and at the end)."
                ),
                io.Int.Input(
                    "seed",
                    default=0,
                    min=0,
                    max=0xFFFFFFFF,
                    control_after_generate=False,
                    tooltip="Noise seed; prompt k uses seed + k.",
                ),
                io.Int.Input("steps", default=20, min=1, max=200, tooltip="Sampling steps."),
                io.Float.Input(
                    "cfg", default=7.0, min=0.0, max=30.0, step=0.1, tooltip="Classifier-free guidance scale."
                ),
                io.Combo.Input(
                    "sampler_name",
                    options=comfy.samplers.KSampler.SAMPLERS,
                    default="euler",
                    tooltip="ComfyUI sampler.",
                ),
                io.Combo.Input(
                    "scheduler",
                    options=comfy.samplers.KSampler.SCHEDULERS,
                    default="normal",
                    tooltip="ComfyUI scheduler.",
                ),
                io.Int.Input("width", default=1024, min=64, max=4096, step=8, tooltip="Sample width in pixels."),
                io.Int.Input("height", default=1024, min=64, max=4096, step=8, tooltip="Sample height in pixels."),
                io.Int.Input(
                    "frames",
                    default=1,
                    min=1,
                    max=1024,
                    optional=True,
                    tooltip="Video models: frames per sample, saved as an animated WebP beside the "
                    "first frame's PNG (Wan/HunyuanVideo take 4k+1, LTX-Video 8k+1). Image "
                    "models render one image whatever this says.",
                ),
            ],
            outputs=[SampleConfig.Output(display_name="sample_config", tooltip="Connect to LoRATrainer.")],
        )

    @classmethod
    def execute(cls, clip, vae, prompts, every, seed, steps, cfg, sampler_name, scheduler, width, height, frames=1):
        lines = tuple(line.strip() for line in prompts.splitlines() if line.strip())
        if not lines:
            raise EriDiffusionError("SampleDuringTraining: prompts is empty; write one prompt per line.")
        settings = SampleSettings(
            prompts=lines,
            positives=tuple(encode(clip, p) for p in lines),
            negative=encode(clip, ""),
            vae=vae,
            every=every,
            seed=seed,
            steps=steps,
            cfg=cfg,
            sampler=sampler_name,
            scheduler=scheduler,
            width=width,
            height=height,
            frames=frames,
        )
        return io.NodeOutput(settings)
