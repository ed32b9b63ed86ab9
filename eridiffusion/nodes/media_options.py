"""The small optional nodes that hold what only video, audio, edit and inpainting runs need, so that
LoadDataset, CacheLatents and SampleDuringTraining show an image LoRA's inputs alone: each feeds one
node's `media_options`. Their widgets are that node's settings of group "media" (declared once,
beside the node's others); a node left out means those settings' defaults and no such input."""

from typing import Any

from comfy_api.latest import io

from ..settings import settings_of
from ..training.data.dataset_settings import DatasetSettings
from ..training.data.training_data import CacheSettings
from ..training.samples.sampler_settings import SamplerSettings
from . import sockets
from .options_nodes import TrainerOptionsNode
from .setting_inputs import SettingValues, inputs_for

GROUP = "media"  # the settings' group that the media options nodes show
HOST_INPUT = "media_options"  # the input of the node they feed


def media_values(options: SettingValues | None) -> dict[str, Any]:
    """{name: value} of a media options node's output (settings and connected sockets); {} for none."""
    return dict(options.values) if options is not None else {}


class MediaOptionsNode(TrainerOptionsNode):
    """Base of the media options nodes: the settings of GROUP in SETTINGS, then sockets(), are the inputs."""

    HOST = ""
    SETTINGS: Any = None  # the settings dataclass of the node it feeds
    SOCKET: Any = None  # the io.Custom type that node takes it as

    @classmethod
    def sockets(cls) -> list:
        return []

    @classmethod
    def inputs(cls) -> list:
        return [*inputs_for(settings_of(cls.SETTINGS), GROUP), *cls.sockets()]

    @classmethod
    def feeds(cls) -> str:
        return f"{cls.HOST}'s {HOST_INPUT}"

    @classmethod
    def execute(cls, **values: Any) -> io.NodeOutput:
        return io.NodeOutput(SettingValues({k: v for k, v in values.items() if v is not None}))


def _audio_vae(purpose: str):
    return io.Vae.Input(
        "audio_vae",
        optional=True,
        tooltip=f"Audio-video models (optional; LTX-2's audio VAE, from LTXVAudioVAELoader): {purpose}",
    )


def _clip_vision(purpose: str):
    return io.ClipVision.Input("clip_vision", optional=True, tooltip=f"Image-to-video (optional): {purpose}")


class DatasetMediaOptions(MediaOptionsNode):
    NODE_ID, DISPLAY_NAME, HOST = "EriDiffusion_DatasetMediaOptions", "DatasetMediaOptions", "LoadDataset"
    DESCRIPTION = (
        "Video clips and audio files: the frames of each training clip and the rate they are taken at, the "
        "seconds of each audio file; for LoadDataset's media_options (images need none of it)."
    )
    SETTINGS, SOCKET = DatasetSettings, sockets.DatasetMediaOptions


class CacheMediaOptions(MediaOptionsNode):
    NODE_ID, DISPLAY_NAME, HOST = "EriDiffusion_CacheMediaOptions", "CacheMediaOptions", "CacheLatents"
    DESCRIPTION = (
        "What video, audio-video, edit and inpainting models learn from beside each image and caption: the "
        "inpainting masks, edit instructions, the image-to-video start image (and its CLIP vision features), "
        "the clips' audio track (audio VAE); for CacheLatents' media_options."
    )
    SETTINGS, SOCKET = CacheSettings, sockets.CacheMediaOptions

    @classmethod
    def sockets(cls) -> list:
        return [
            _audio_vae("each clip's audio track is encoded beside its frames and trained on too (clips with sound)."),
            _clip_vision(
                "with start_image on (Wan 2.1 I2V: CLIP-ViT-H, HunyuanVideo 1.5 I2V: SigLIP), the start image's "
                "features too, as CLIPVisionEncode gives them to WanImageToVideo / HunyuanVideo15ImageToVideo."
            ),
        ]


class SampleMediaOptions(MediaOptionsNode):
    NODE_ID, DISPLAY_NAME, HOST = "EriDiffusion_SampleMediaOptions", "SampleMediaOptions", "SampleDuringTraining"
    DESCRIPTION = (
        "Video and audio samples: frames or seconds per sample, the image-to-video start image (and its CLIP "
        "vision features), the audio VAE that gives the samples their sound; for SampleDuringTraining's "
        "media_options."
    )
    SETTINGS, SOCKET = SamplerSettings, sockets.SampleMediaOptions

    @classmethod
    def sockets(cls) -> list:
        return [
            io.Image.Input(
                "start_image",
                optional=True,
                tooltip="Image-to-video models (optional): the first frame every sample starts from, fed as "
                "WanImageToVideo / HunyuanVideo15ImageToVideo feed it.",
            ),
            _audio_vae("the samples are drawn with their sound and saved as mp4."),
            _clip_vision("the start image's features too, as CacheMediaOptions' clip_vision gives them in training."),
        ]


MEDIA_OPTIONS_NODES = (DatasetMediaOptions, CacheMediaOptions, SampleMediaOptions)
