"""SampleDuringTraining: prompts and sampler settings → SAMPLE_CONFIG for the trainer."""

from typing import Any

from comfy_api.latest import io

from ..errors import EriDiffusionError
from ..training.data.audio import is_audio_vae
from ..training.data.audio_captions import AudioPrompt
from ..training.data.clip_audio import is_clip_audio_vae
from ..training.data.start_image import start_values, with_start_values
from ..training.run.av_samples import with_frame_rate
from ..training.run.samples import SamplerSettings, SampleSettings, check_sample_size
from ..training.settings import settings_of
from . import sockets
from .setting_inputs import inputs_for
from .sockets import CATEGORY


def encode(clip, text, keywords=None):
    return clip.encode_from_tokens_scheduled(clip.tokenize(text, **(keywords or {})))


def encode_prompts(clip, vae, settings):
    """(positives, negative) of the prompt lines: as CLIPTextEncode encodes them or, for an audio
    model's VAE, as TextEncodeAceStepAudio1.5 does (the line as tags, instrumental, the sample's
    duration) with ConditioningZeroOut of the empty prompt as the negative."""
    lines = settings.prompt_lines()
    if not is_audio_vae(vae):
        return tuple(encode(clip, p) for p in lines), encode(clip, "")
    import nodes  # ComfyUI's

    keywords = AudioPrompt().text_keywords(settings.seconds)
    negative = nodes.ConditioningZeroOut().zero_out(encode(clip, "", keywords))[0]
    return tuple(encode(clip, p, keywords) for p in lines), negative


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
    def execute(
        cls,
        clip: Any,
        vae: Any,
        start_image: Any = None,
        audio_vae: Any = None,
        clip_vision: Any = None,
        **values: Any,
    ) -> io.NodeOutput:
        settings = SamplerSettings(**values)
        if not is_audio_vae(vae):
            check_sample_size(vae, settings.width, settings.height)
        if clip_vision is not None and start_image is None:
            raise EriDiffusionError(
                "SampleDuringTraining's clip_vision encodes the start image: connect start_image too, or leave "
                "clip_vision unconnected."
            )
        positives, negative = encode_prompts(clip, vae, settings)
        if start_image is not None:  # image-to-video: as the host's node sets it on both prompts
            start = start_values(vae, start_image, settings.width, settings.height, settings.frames, clip_vision)
            positives = tuple(with_start_values(p, start) for p in positives)
            negative = with_start_values(negative, start)
        if audio_vae is not None:  # audio-video: as LTXVConditioning sets the frame rate on both prompts
            if not is_clip_audio_vae(audio_vae):
                raise EriDiffusionError(
                    "SampleDuringTraining's audio_vae is not an audio-video model's audio VAE (LTX-2's, from "
                    "LTXVAudioVAELoader); connect that one or leave it unconnected."
                )
            positives, negative = tuple(with_frame_rate(p) for p in positives), with_frame_rate(negative)
        sample_settings = SampleSettings(
            prompts=settings.prompt_lines(),
            positives=positives,
            negative=negative,
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
            seconds=settings.seconds,
            audio_vae=audio_vae,
        )
        return io.NodeOutput(sample_settings)
