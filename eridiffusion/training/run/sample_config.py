"""SampleDuringTraining's SAMPLE_CONFIG: its prompt lines encoded by the graph's CLIP (and their
images by its VAE), each with its own settings."""

from ..data.audio import is_audio_vae
from ..data.audio_captions import AudioPrompt
from .sample_inputs import prompt_sample
from .samples import SampleSettings


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


def sample_config(clip, vae, settings, image_folder):
    """SampleDuringTraining's SAMPLE_CONFIG of SamplerSettings `settings`; relative image paths in
    the prompt lines are taken from `image_folder`."""
    specs = settings.prompt_specs(image_folder)
    if not is_audio_vae(vae):
        settings.check_sizes(vae, image_folder)
    text = text_encoding(clip, vae, settings)
    per_prompt = tuple(prompt_sample(clip, vae, spec, settings, k, text) for k, spec in enumerate(specs))
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
    )
