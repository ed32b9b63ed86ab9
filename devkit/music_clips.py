"""Short synthesized music clips (chords, melodies, drum-like noise bursts, made with numpy) written as
real audio files with ACE-Step-style captions, for the tests of audio families: no music ships with
the project. Two styles, each clip different (key, tempo, melody), captioned with its style's tags."""

import json
import os

import numpy as np

from devkit.pyav import pyav

RATE = 44100  # written at CD rate, so encoding resamples to the VAE's 48 kHz as for most users' files
SECONDS = 2.5  # a little longer than the tiny stack's 2 s training length: the cut is exercised

# style: (tags, key, tempo range, chord shape, drum pattern per beat)
STYLES = {
    "ambient": ("ambient, soft synth pads, slow, calm", "C", (60, 76), (0, 4, 7, 11), "...."),
    "rock": ("rock, distorted guitar, drums, energetic", "E", (120, 150), (0, 7, 12), "x.x."),
}
ROOTS = {"C": 261.63, "E": 329.63}


# Notes are tuned to multiples of 25 Hz, the latent frame rate of 48 kHz audio VAEs (1920 samples a
# frame): a held note then repeats exactly within every frame, so a tiny random VAE encodes it to a
# steady latent, as a trained VAE encodes a held note, instead of to the beat of its phase against the frames.
FRAME_HZ = 25.0


def _tone(freq, t, bright):
    """A note: a sine with `bright` odd harmonics (a soft pad at 0, a buzzing lead at 3)."""
    freq = max(FRAME_HZ, round(freq / FRAME_HZ) * FRAME_HZ)
    wave = np.sin(2 * np.pi * freq * t)
    for k in range(1, bright + 1):
        wave += np.sin(2 * np.pi * freq * (2 * k + 1) * t) / (2 * k + 1)
    return wave


def synthesize(style, index, seconds=SECONDS, rate=RATE):
    """(stereo float32 (samples, 2), bpm, key) of clip `index` of `style`: the style's chord bed, a
    melody of random scale notes on the beats (its own tempo) and, for rock, noise-burst drums."""
    rng = np.random.default_rng(1000 * index + len(style))
    _, root_name, (low, high), chord, drums = STYLES[style]
    bpm = int(rng.integers(low, high))
    root = ROOTS[root_name]
    t = np.arange(int(seconds * rate)) / rate
    bright = 0 if style == "ambient" else 3
    audio = sum(_tone(root * 2 ** (step / 12) / 2, t, bright) for step in chord) / len(chord)
    beat = 60.0 / bpm
    scale = (0, 2, 4, 7, 9, 12)
    for start in np.arange(0, seconds, beat):
        span = (t >= start) & (t < start + beat)
        note = root * 2 ** (scale[int(rng.integers(len(scale)))] / 12)
        envelope = np.exp(-(t[span] - start) * (2.0 if style == "ambient" else 8.0))
        audio[span] += 0.6 * envelope * _tone(note, t[span], bright)
        if drums[int(start / beat) % len(drums)] == "x":
            hit = span & (t < start + 0.08)
            audio[hit] += 0.8 * rng.standard_normal(hit.sum()) * np.exp(-(t[hit] - start) * 40)
    audio = 0.3 * audio / np.abs(audio).max()
    pan = 0.1 + 0.8 * rng.random()
    stereo = np.stack([audio * (1 - pan), audio * pan], axis=1).astype(np.float32)
    return stereo, bpm, f"{root_name} major"


def write_audio(path, stereo, rate=RATE):
    """Write float (samples, 2) audio with PyAV: 16-bit PCM in .wav, FLAC in .flac."""
    av = pyav()

    codec, sample_format = ("pcm_s16le", "s16") if path.endswith(".wav") else ("flac", "s16")
    pcm = (np.clip(stereo, -1, 1) * 32767).astype(np.int16)
    with av.open(path, "w") as container:
        stream = container.add_stream(codec, rate=rate, layout="stereo")
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format=sample_format, layout="stereo")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


def music_dataset(folder, per_style=3, seconds=SECONDS):
    """A dataset folder of `per_style` clips of each style, wav and flac in turn, each with its tags in
    <name>.txt, bpm and key in <name>.json (ACE-Step 1.5's annotation) and, for rock, lyrics in
    <name>.lyrics.txt (ambient clips are instrumental). Returns the folder."""
    os.makedirs(folder, exist_ok=True)
    for style in STYLES:
        for index in range(per_style):
            name = f"{style}_{index:02d}"
            stereo, bpm, key = synthesize(style, index, seconds)
            write_audio(os.path.join(folder, name + (".wav" if index % 2 == 0 else ".flac")), stereo)
            with open(os.path.join(folder, name + ".txt"), "w") as f:
                f.write(STYLES[style][0])
            with open(os.path.join(folder, name + ".json"), "w") as f:
                json.dump({"bpm": bpm, "keyscale": key, "timesignature": "4", "language": "en"}, f)
            if style == "rock":
                with open(os.path.join(folder, name + ".lyrics.txt"), "w") as f:
                    f.write("[Verse]\nloud and fast we go\n[Chorus]\nturn it up")
    return folder
