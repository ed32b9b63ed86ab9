"""SampleDuringTraining: prompts and sampler settings → SAMPLE_CONFIG for the trainer."""

from typing import Any

from comfy_api.latest import io

from ..errors import EriDiffusionError
from ..settings import settings_of
from ..training.samples.config import sample_config
from ..training.samples.sampler_settings import SamplerSettings
from . import sockets
from .media_options import HOST_INPUT, media_values
from .setting_inputs import SettingValues, inputs_for
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
                *inputs_for(settings_of(SamplerSettings), ""),
                sockets.SampleMediaOptions.Input(
                    HOST_INPUT,
                    optional=True,
                    tooltip="From SampleMediaOptions (optional): video and audio samples (frames, seconds, the "
                    "image-to-video start image, the audio VAE).",
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
        media_options: SettingValues | None = None,
        **values: Any,
    ) -> io.NodeOutput:
        import folder_paths

        media = media_values(media_options)
        connected = {name: media.pop(name, None) for name in ("start_image", "audio_vae", "clip_vision")}
        settings = SamplerSettings(**values, **media)
        config = sample_config(
            clip,
            vae,
            settings,
            folder_paths.get_input_directory(),
            **connected,
        )
        return io.NodeOutput(config)
