"""SampleDuringTraining: prompts and sampler settings → SAMPLE_CONFIG for the trainer."""

from typing import Any

from comfy_api.latest import io

from ..errors import EriDiffusionError
from ..settings import settings_of
from ..training.samples.config import sample_config
from ..training.samples.sampler_settings import SamplerSettings
from . import sockets
from .setting_inputs import inputs_for
from .sockets import CATEGORY


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
                io.Image.Input(
                    "start_image",
                    optional=True,
                    tooltip="Image-to-video models (optional): the first frame every sample starts from, fed as "
                    "WanImageToVideo / HunyuanVideo15ImageToVideo feed it.",
                ),
                io.Vae.Input(
                    "audio_vae",
                    optional=True,
                    tooltip="Audio-video models (optional; LTX-2's audio VAE, from LTXVAudioVAELoader): the samples "
                    "are drawn with their sound and saved as mp4.",
                ),
                io.ClipVision.Input(
                    "clip_vision",
                    optional=True,
                    tooltip="Image-to-video (optional): the start image's features too, as CacheLatents' clip_vision "
                    "gives them in training.",
                ),
            ],
            outputs=[sockets.SampleConfig.Output(display_name="sample_config", tooltip="Connect to LoRATrainer.")],
        )

    @classmethod
    def validate_inputs(cls, prompts: str | None = None) -> bool | str:
        """ComfyUI asks this when the prompt is queued, before any node runs: a prompt line with a bad
        flag, number or image is refused before any image is encoded for training."""
        import folder_paths

        if prompts is None:  # (linked from another node: its value comes at run time)
            return True
        try:
            SamplerSettings(prompts=prompts).prompt_specs(folder_paths.get_input_directory())
        except EriDiffusionError as error:
            return str(error)
        return True

    @classmethod
    def execute(
        cls,
        clip: Any,
        vae: Any,
        start_image: Any = None,
        audio_vae: Any = None,
        clip_vision: Any = None,
        **values: Any,
    ) -> io.NodeOutput:
        import folder_paths

        settings = SamplerSettings(**values)
        config = sample_config(
            clip,
            vae,
            settings,
            folder_paths.get_input_directory(),
            start_image=start_image,
            audio_vae=audio_vae,
            clip_vision=clip_vision,
        )
        return io.NodeOutput(config)
