"""Audio-video training (LTX-2): a clip's audio track, cut to the clip (its frames / fps seconds from
the start, as the frames are sampled), encoded with the host's LTX-2 audio VAE as its
LTXVAudioVAEEncode node encodes it."""

import torch

from ...errors import EriDiffusionError
from .audio import read_audio


def is_clip_audio_vae(vae):
    """Whether ComfyUI's VAE `vae` is an audio VAE of an audio-video model (LTX-2's: mel latents of
    channels x time x frequency bins)."""
    model = getattr(vae, "first_stage_model", None)
    return hasattr(model, "latents_per_second") and hasattr(model, "latent_frequency_bins")


def check_audio_vae(vae, dataset):
    """Refuse an audio VAE that is no audio-video model's, and a dataset whose samples have no sound
    (images, frame folders, or clips read at every stored frame, whose length in seconds is unknown)."""
    if not is_clip_audio_vae(vae):
        raise EriDiffusionError(
            "CacheLatents' audio_vae is not the audio VAE of an audio-video model (LTX-2's, from "
            "LTXVAudioVAELoader); connect that one, or leave audio_vae unconnected."
        )
    silent = [record.path for record in dataset.records if not record.clip or not _is_file(record.path)]
    if silent:
        raise EriDiffusionError(
            f"{silent[0]} has no audio track (an image or a frame folder): audio-video training (CacheLatents' "
            "audio_vae) takes clip files with sound (mp4, webm, mov); remove it or leave audio_vae unconnected."
        )
    if not dataset.video.fps:
        raise EriDiffusionError(
            f"{dataset.folder}: LoadDataset's fps is 0 (every stored frame), so a clip's length in seconds is "
            "unknown; set fps (LTX-2: 24 or 25) for audio-video training."
        )


def _is_file(path):
    import os

    return os.path.isfile(path)


def clip_audio(path, video):
    """The AUDIO ({"waveform": (1, channels, samples), "sample_rate"}) of the clip file at `path` over
    the frames `video` (VideoOptions) samples from it: frames / fps seconds from its start, a shorter
    track padded with silence."""
    waveform, rate = read_audio(path)
    samples = round(video.frames / video.fps * rate)
    waveform = waveform[:, :samples]
    if waveform.shape[-1] < samples:
        waveform = torch.nn.functional.pad(waveform, (0, samples - waveform.shape[-1]))
    return {"waveform": waveform[None], "sample_rate": rate}


def encoded_audio(audio_vae, audio):
    """(channels, time, frequency bins) latent of AUDIO `audio`, as LTXVAudioVAEEncode encodes it."""
    import comfy_extras.nodes_lt_audio as lt_audio  # ComfyUI's

    latent = lt_audio.LTXVAudioVAEEncode.execute(audio, audio_vae).args[0]["samples"]
    return latent[0].to("cpu", torch.float32).contiguous()
