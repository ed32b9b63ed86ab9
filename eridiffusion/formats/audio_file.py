"""Writing audio files: a sample rendered by an audio model as FLAC, encoded with PyAV the way ComfyUI's
SaveAudio node writes it (32-bit float frames into the flac encoder), through a temp file and rename."""

from typing import TYPE_CHECKING

import av

from .atomic_file import write_atomic

if TYPE_CHECKING:
    import torch


def write_flac(path: str, waveform: "torch.Tensor", sample_rate: int) -> str:
    """Write float `waveform` (channels, samples) in [-1, 1] to `path` as FLAC; return the path."""
    layout = "mono" if waveform.shape[0] == 1 else "stereo"
    planar = waveform.movedim(0, 1).reshape(1, -1).float().cpu().numpy()

    def write(tmp: str) -> None:
        with av.open(tmp, mode="w", format="flac") as container:
            stream = container.add_stream("flac", rate=sample_rate, layout=layout)
            frame = av.AudioFrame.from_ndarray(planar, format="flt", layout=layout)
            frame.sample_rate = sample_rate
            frame.pts = 0
            container.mux(stream.encode(frame))
            container.mux(stream.encode(None))

    return write_atomic(path, write, overwrite=True)
