"""SampleDuringTraining's SAMPLE_CONFIG: its prompt lines encoded by the graph's CLIP (and their
images by its VAE), each with its own settings."""

from dataclasses import replace

from ...errors import EriDiffusionError
from ..data.audio import is_audio_vae
from ..data.audio_captions import AudioPrompt
from ..data.clip_audio import is_clip_audio_vae
from ..data.start_image import start_values, with_start_values
from .audio_video import with_frame_rate
from .inputs import prompt_sample
from .render import SampleSettings


def encode(clip, text, keywords=None):
    return clip.encode_from_tokens_scheduled(clip.tokenize(text, **(keywords or {})))


def text_encoding(clip, vae, settings):
    """encode(text) of a prompt: as CLIPTextEncode encodes it or, for an audio model's VAE, as
    TextEncodeAceStepAudio1.5 does (the text as tags, instrumental, the sample's duration), where
    the empty negative is ConditioningZeroOut's."""
    if not is_audio_vae(vae):
        return lambda text: encode(clip, text)
    import nodes  # ComfyUI's

    keywords = AudioPrompt().text_keywords(settings.seconds)

    def encode_audio(text):
        encoded = encode(clip, text, keywords)
        return nodes.ConditioningZeroOut().zero_out(encoded)[0] if not text else encoded

    return encode_audio


def sample_config(clip, vae, settings, image_folder, start_image=None, audio_vae=None, clip_vision=None):
    """SampleDuringTraining's SAMPLE_CONFIG of SamplerSettings `settings`; relative image paths in
    the prompt lines are taken from `image_folder`. `start_image` (image-to-video: each sample's first
    frame, with `clip_vision`'s features of it) and `audio_vae` (audio-video: samples with their sound)
    are set on every prompt as the host's nodes set them."""
    check_conditioning_inputs(start_image, audio_vae, clip_vision)
    specs = settings.prompt_specs(image_folder)
    if not is_audio_vae(vae):
        settings.check_sizes(vae, image_folder)
    text = text_encoding(clip, vae, settings)
    per_prompt = tuple(prompt_sample(clip, vae, spec, settings, k, text) for k, spec in enumerate(specs))
    if start_image is not None:  # image-to-video: as the host's node sets it on both prompts
        starts = {}  # the start frame's values at each size the prompts render at
        for p in per_prompt:
            if (p.width, p.height) not in starts:
                starts[p.width, p.height] = start_values(
                    vae, start_image, p.width, p.height, settings.frames, clip_vision
                )
        per_prompt = tuple(
            replace(_conditioned(p, lambda c, p=p: with_start_values(c, starts[p.width, p.height])), starts=True)
            for p in per_prompt
        )
    if audio_vae is not None:  # audio-video: as LTXVConditioning sets the frame rate on both prompts
        per_prompt = tuple(_conditioned(p, with_frame_rate) for p in per_prompt)
    return SampleSettings(
        prompts=tuple(spec.text for spec in specs),
        positives=tuple(p.positive for p in per_prompt),
        negative=text(""),
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
        per_prompt=per_prompt,
        audio_vae=audio_vae,
    )


def check_conditioning_inputs(start_image, audio_vae, clip_vision):
    """The optional inputs that condition every sample, checked before any prompt is encoded."""
    if clip_vision is not None and start_image is None:
        raise EriDiffusionError(
            "SampleDuringTraining's clip_vision encodes the start image: connect start_image too, or leave "
            "clip_vision unconnected."
        )
    if audio_vae is not None and not is_clip_audio_vae(audio_vae):
        raise EriDiffusionError(
            "SampleDuringTraining's audio_vae is not an audio-video model's audio VAE (LTX-2's, from "
            "LTXVAudioVAELoader); connect that one or leave it unconnected."
        )


def _conditioned(prompt, change):
    """PromptSample `prompt` with `change(conditioning)` applied to its positive and its negative."""
    return replace(prompt, positive=change(prompt.positive), negative=change(prompt.negative))
