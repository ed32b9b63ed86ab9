"""Audio files of a dataset: which files are audio, reading one as the host's LoadAudio node reads it,
and the waveform an audio VAE encodes, resampled as VAEEncodeAudio resamples and cut or padded to the
training length."""

import os
from dataclasses import dataclass

import torch

from ...comfy_compat import host_audio_io
from ...errors import EriDiffusionError
from ...settings import check_declared
from .dataset_settings import DatasetSettings

# What LoadAudio reads (PyAV): the formats ACE-Step's own trainer takes.
AUDIO_EXTENSIONS = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a")
SUPPORTED_AUDIO = ", ".join(ext[1:] for ext in AUDIO_EXTENSIONS)


@dataclass(frozen=True)
class AudioOptions:
    """How audio files become training samples: `seconds` from the start of each file, a shorter file
    padded with silence at its end."""

    seconds: float = 120.0

    def __post_init__(self):
        check_declared(DatasetSettings, "LoadDataset", seconds=self.seconds)


def is_audio_file(name):
    return os.path.splitext(name.lower())[1] in AUDIO_EXTENSIONS


def is_audio_vae(vae):
    """Whether ComfyUI's VAE `vae` encodes audio (a 1-D latent: ACE-Step 1.5's, Stable Audio's)."""
    return getattr(vae, "latent_dim", 2) == 1


def _host_audio():
    io = host_audio_io()
    if io is None:
        raise EriDiffusionError(
            "this ComfyUI cannot read audio files the way its LoadAudio node reads them (its comfy_extras.nodes_audio "
            "or torchaudio does not import); update ComfyUI to 0.28 or later with its requirements (torchaudio)."
        )
    return io


def read_audio(path):
    """(waveform (channels, samples) float32, sample rate) of the audio file at `path`, decoded as
    LoadAudio decodes it; an error naming the file when it cannot be, or holds no sound."""
    read, _ = _host_audio()
    try:
        waveform, rate = read(path)
    except Exception as error:  # PyAV raises its own error types for damaged or foreign files
        raise EriDiffusionError(
            f"{path} cannot be read as audio ({error}); re-export it as {SUPPORTED_AUDIO} or move it out of the folder."
        ) from None
    if waveform.shape[-1] == 0 or not rate:
        raise EriDiffusionError(f"{path} holds no audio samples; re-export it or move it out of the folder.")
    return waveform.float(), int(rate)


def waveform_for_vae(path, vae, options):
    """(1, samples, channels) of the audio file at `path` for `vae.encode`: resampled to the VAE's
    rate (as VAEEncodeAudio does), then the first `options.seconds` (the latent frames
    EmptyAceStep1.5LatentAudio gives that duration, times the VAE's samples per frame), a shorter file
    padded with silence."""
    _, resample = _host_audio()
    waveform, rate = read_audio(path)
    vae_rate = vae.audio_sample_rate
    if rate != vae_rate:
        waveform = resample(waveform, rate, vae_rate)
    samples = audio_latent_frames(options.seconds, vae) * vae.downscale_ratio
    waveform = waveform[:, :samples]
    if waveform.shape[-1] < samples:
        waveform = torch.nn.functional.pad(waveform, (0, samples - waveform.shape[-1]))
    return waveform[None].movedim(1, -1)


def audio_latent_frames(seconds, vae):
    """Latent frames of `seconds` of audio, as the host's EmptyAceStep1.5LatentAudio counts them."""
    return round(seconds * vae.audio_sample_rate / vae.downscale_ratio)
