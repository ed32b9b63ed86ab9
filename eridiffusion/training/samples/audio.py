"""Samples of an audio model: the empty latent the host's EmptyAceStep1.5LatentAudio node makes, the
waveform its VAEDecodeAudio node gives (loudness-normalized as it does), written as FLAC as SaveAudio
writes it, and a spectrogram picture of it for the trainer's sample preview."""

import torch

from ...formats.audio_file import write_flac
from ..data.audio import audio_latent_frames

PREVIEW_SIZE = (256, 128)  # width, height of the spectrogram preview in pixels


def empty_audio_latent(model, vae, seconds):
    """The zero latent of `seconds` of audio: the model's latent channels, the VAE's frames per second."""
    return torch.zeros((1, model.latent_format.latent_channels, audio_latent_frames(seconds, vae)))


def decoded_audio(vae, samples):
    """(channels, samples) waveform of one latent, as VAEDecodeAudio decodes it: its loudness divided
    by 5 standard deviations where that exceeds 1, so a sample never clips."""
    audio = vae.decode(samples).movedim(-1, 1)
    std = torch.std(audio, dim=[1, 2], keepdim=True) * 5.0
    std[std < 1.0] = 1.0
    return (audio / std)[0].float().cpu()


def save_audio_sample(waveform, vae, path):
    """Write the sample as FLAC at the VAE's output rate; return (spectrogram IMAGE (1,H,W,3), path)."""
    rate = getattr(vae, "audio_sample_rate_output", vae.audio_sample_rate)
    return spectrogram(waveform), write_flac(path, waveform.clamp(-1, 1), rate)


def spectrogram(waveform):
    """A (1, H, W, 3) picture of the waveform's log-magnitude spectrogram (low notes at the bottom), in [0, 1]."""
    mono = waveform.mean(0)
    window = 1024 if mono.numel() >= 1024 else max(2, mono.numel())
    magnitude = torch.stft(mono, window, hop_length=window // 4, window=torch.hann_window(window), return_complex=True)
    level = torch.log1p(magnitude.abs() * 100).flip(0)
    level = (level - level.min()) / (level.max() - level.min()).clamp_min(1e-6)
    picture = torch.nn.functional.interpolate(level[None, None], size=PREVIEW_SIZE[::-1], mode="bilinear")[0, 0]
    return picture[None, :, :, None].expand(-1, -1, -1, 3).contiguous()
