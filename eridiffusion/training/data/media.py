"""Opening the media a dataset holds, in one place: still images and masks as upright 8-bit PIL
images (EXIF orientation, colour modes, transparency, 16-bit grey), clip files (PyAV) and frame
folders as a fixed number of RGB frames sampled at a target frame rate, and the digest of a media
item's bytes that fingerprints a dataset."""

import hashlib
import os
import re
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

from ...errors import EriDiffusionError
from ...settings import check_declared
from .dataset_settings import DatasetSettings

VIDEO_EXTENSIONS = (".mp4", ".webm", ".mov", ".gif")
FRAME_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp")  # the image kinds a frame folder may hold
# A clip whose rate is up to this much below the target still counts as that rate (29.97 for 30).
_RATE_SLACK = 1.02
# Timestamps are rounded to the container's time base (webm: 1 ms); within one unit of it (and at
# least this) a frame counts as starting on time.
_TIME_SLACK = 1e-4


@dataclass(frozen=True)
class VideoOptions:
    """How clips become training samples: `frames` frames, `fps` apart (0: every frame as stored)."""

    frames: int = 17
    fps: float = 16.0

    def __post_init__(self):
        check_declared(DatasetSettings, "LoadDataset", frames=self.frames, fps=self.fps)


def check_frames_for_vae(frames, temporal_compression, where):
    """Refuse a frame count a video VAE cannot take: it encodes the first frame alone and then
    groups of `temporal_compression` frames, so it needs k * temporal_compression + 1 frames."""
    if frames % temporal_compression == 1 % temporal_compression:
        return
    lower = (frames - 1) // temporal_compression * temporal_compression + 1
    upper = lower + temporal_compression
    rule = f"{temporal_compression}k+1"
    raise EriDiffusionError(
        f"{where}: clips of {frames} frames do not fit this VAE, which compresses time "
        f"{temporal_compression}x and takes {rule} frames (Wan and HunyuanVideo: 4k+1, "
        f"LTX-Video: 8k+1); set LoadDataset's frames to {lower} or {upper}."
    )


def is_clip_file(name):
    return os.path.splitext(name.lower())[1] in VIDEO_EXTENSIONS


def frame_folder_files(folder):
    """The frames of a frame folder, in number order (frame2 before frame10), and the visible
    entries that are not frames."""
    frames, others = [], []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                is_frame = entry.is_file() and os.path.splitext(entry.name.lower())[1] in FRAME_EXTENSIONS
            except OSError:  # a symbolic link that loops: not a frame
                is_frame = False
            if is_frame:
                frames.append(entry.name)
            else:
                others.append(entry.name)
    return sorted(frames, key=_natural_key), sorted(others)


def read_clip(path, options):
    """`options.frames` RGB PIL images from the clip file or frame folder at `path`. A frame folder
    has no timing, so its first frames are taken in number order; a clip file is sampled at
    `options.fps` (each frame the one on screen at k / fps seconds), or frame by frame when fps is 0."""
    if os.path.isdir(path):
        return _read_frame_folder(path, options)
    return _read_clip_file(path, options)


def _read_frame_folder(folder, options):

    names = frame_folder_files(folder)[0]
    if len(names) < options.frames:
        raise EriDiffusionError(
            f"{folder} holds {len(names)} frames, fewer than the {options.frames} frames "
            "training takes; add frames, lower LoadDataset's frames, or remove the folder."
        )
    images = [open_image_rgb(os.path.join(folder, name)) for name in names[: options.frames]]
    if len({image.size for image in images}) > 1:
        sizes = sorted({f"{w}x{h}" for w, h in (image.size for image in images)})
        raise EriDiffusionError(
            f"{folder} mixes frame sizes ({', '.join(sizes)}); every frame of a clip must "
            "have the same size: re-export the frames at one size."
        )
    return images


def _read_clip_file(path, options):
    try:
        import av  # lazy: image-only training never needs PyAV
    except ImportError:
        raise EriDiffusionError(
            f"{path} is a video clip and reading clips needs PyAV; install it with "
            "`pip install av` (see requirements.txt) or remove the clip."
        ) from None
    try:
        with av.open(path) as container:
            if not container.streams.video:
                raise EriDiffusionError(f"{path} has no video stream; re-export it as a video or remove it.")
            stream = container.streams.video[0]
            rate = _stream_rate(stream)
            if options.fps and rate and options.fps > rate * _RATE_SLACK:
                raise EriDiffusionError(
                    f"{path} is {rate:.3g} fps, slower than the fps {options.fps:g} asked for, "
                    f"so frames would repeat; set LoadDataset's fps to {rate:.3g} or lower "
                    "(0 takes every stored frame)."
                )
            slack = max(_TIME_SLACK, float(stream.time_base or 0))
            frames, end = _sample(container.decode(stream), options, rate, slack)
    except FileNotFoundError:
        raise EriDiffusionError(f"{path} does not exist; check the path or reload the dataset.") from None
    except av.FFmpegError as error:
        raise EriDiffusionError(
            f"{path} cannot be decoded as a video ({error}); it is corrupt or truncated: "
            "re-export it from the original or remove it."
        ) from error
    if len(frames) < options.frames:
        fix = (
            "lower LoadDataset's frames"
            if not options.fps
            else "lower LoadDataset's frames or raise its fps (a shorter span)"
        )
        needed = (
            f"{options.frames} frames"
            if not options.fps
            else f"{options.frames} frames at {options.fps:g} fps ({options.frames / options.fps:.2f} s)"
        )
        raise EriDiffusionError(
            f"{path} is too short: it gives {len(frames)} of the {needed} training takes "
            f"(the clip runs {end:.2f} s); use a longer clip, {fix}, or remove it."
        )
    return frames


def _sample(decoded, options, rate, slack):
    """(picked PIL frames, seconds decoded): frame by frame when fps is 0, else for each k the frame
    on screen at k / fps seconds after the first one; stops decoding once every frame is known."""
    picked, shown, end = [], None, 0.0  # shown: the last decoded frame, on screen until the next starts
    start = None
    for index, frame in enumerate(decoded):
        time = frame.time if frame.time is not None else index / (rate or 1.0)
        start = time if start is None else start
        time -= start
        if not options.fps:
            picked.append(_upright(frame))
        while (
            options.fps
            and shown is not None
            and len(picked) < options.frames
            and len(picked) / options.fps < time - slack
        ):
            picked.append(_upright(shown))
        if len(picked) >= options.frames:
            return picked, end
        shown, end = frame, time + _duration(frame, rate)
    while (
        options.fps and shown is not None and len(picked) < options.frames and len(picked) / options.fps < end - slack
    ):
        picked.append(_upright(shown))
    return picked, end


def _upright(frame):
    """The frame as an RGB PIL image, turned as its display matrix says (phones store portrait
    clips sideways with a rotation), the way players show it."""
    from PIL import Image

    image = frame.to_image()
    rotation = round(getattr(frame, "rotation", 0) or 0) % 360  # degrees counterclockwise
    turns = {90: Image.Transpose.ROTATE_90, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_270}
    if rotation in turns:
        return image.transpose(turns[rotation])
    return image.rotate(rotation, expand=True) if rotation else image


def _duration(frame, rate):
    duration = getattr(frame, "duration", None)
    if duration and frame.time_base is not None:
        return float(duration * frame.time_base)
    return 1.0 / rate if rate else 0.0


def _stream_rate(stream):
    for rate in (stream.average_rate, stream.guessed_rate, stream.base_rate):
        if rate:
            return float(rate)
    return 0.0


def _natural_key(name):
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name)]


IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp")


# Modes Pillow gives 16-bit grayscale PNGs; its own convert() clips them to 8 bits instead of scaling.
_WIDE_GRAY_MODES = ("I", "I;16", "I;16L", "I;16B", "I;16N")


def _open_upright(path, what, missing_fix, unreadable_fix):
    """The file at `path` fully decoded and turned upright by its EXIF orientation; each way it cannot
    be opened is an error naming it (`what`: "" for an image, "mask " for a mask) and the fix."""
    try:
        with Image.open(path) as stored:
            stored.load()
            return ImageOps.exif_transpose(stored)
    except FileNotFoundError:
        raise EriDiffusionError(f"{what}{path} does not exist; {missing_fix}.") from None
    except PermissionError:
        raise EriDiffusionError(
            f"{what}{path} cannot be opened: permission denied; make it readable by the user running ComfyUI."
        ) from None
    except Image.DecompressionBombError as error:
        raise EriDiffusionError(
            f"{what}{path} is larger than Pillow's safety limit ({error}); downscale it before training."
        ) from error
    except (OSError, SyntaxError, ValueError) as error:
        raise EriDiffusionError(f"{what}{path} cannot be read as an image ({error}); {unreadable_fix}") from error


def _eight_bit_gray(image):
    """A 16-bit (or 32-bit integer) grayscale image scaled to 8 bits."""
    return image.convert("I").point(lambda value: value * (255 / 65535) + 0.5).convert("L")


def open_image_rgb(path):
    """The image at `path`, fully decoded, turned upright by its EXIF orientation, in RGB;
    transparency is composited on white and 16-bit grayscale scaled to 8 bits."""
    image = _open_upright(
        path,
        "",
        "check the path or reload the dataset",
        "it is corrupt or truncated: re-export it from the original or remove it.",
    )
    if image.mode in _WIDE_GRAY_MODES:
        if "transparency" in image.info:
            raise EriDiffusionError(
                f"{path} is 16-bit grayscale with a transparent color key, which "
                "EriDiffusion does not composite; re-export it as 8-bit RGBA or RGB."
            )
        return _eight_bit_gray(image).convert("RGB")
    if image.mode == "RGB":
        return image
    try:
        if image.has_transparency_data:
            white = Image.new("RGBA", image.size, (255, 255, 255, 255))
            return Image.alpha_composite(white, image.convert("RGBA")).convert("RGB")
        return image.convert("RGB")
    except ValueError as error:
        raise EriDiffusionError(
            f"{path} is in color mode {image.mode}, which Pillow cannot turn into "
            f"RGB ({error}); re-export it as an RGB png or jpg."
        ) from None


def open_mask(path):
    """The mask at `path` as an 8-bit greyscale PIL image, upright by its own EXIF orientation;
    transparent parts count as black (ignored)."""
    image = _open_upright(path, "mask ", "put it back or reload the dataset", "re-export it as a greyscale png.")
    if image.mode in _WIDE_GRAY_MODES:
        return _eight_bit_gray(image)
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        black = Image.new("RGBA", image.size, (0, 0, 0, 255))
        image = Image.alpha_composite(black, image.convert("RGBA"))
    if image.mode not in ("L", "1"):
        _check_grey(image.convert("RGB"), path)
    return image.convert("L")


def _check_grey(rgb, path):
    """A mask painted in colour (red on black ...) would count by its brightness alone (pure red: 30% weight);
    refuse one whose pixels are visibly coloured (JPEG's slight tints pass)."""
    pixels = np.asarray(rgb, dtype=np.int16)
    spread = pixels.max(axis=2) - pixels.min(axis=2)
    coloured = float((spread > 32).mean())
    if coloured > 0.01:
        raise EriDiffusionError(
            f"mask {path} is in colour ({coloured:.0%} of its pixels), but a mask is read as greyscale (white: "
            "learn or repaint, black: ignore, grey: in between), so a colour counts by its brightness alone; "
            "re-export it in greyscale."
        )


def check_mask_fits(mask_path, image_path, size):
    """A mask must have its image's aspect ratio (as the image is shown: after EXIF orientation); a
    mask of another size is scaled to the image's. Returns the mask's mean in [0, 1] (1: all white)."""
    mask = open_mask(mask_path)
    width, height = size
    if abs(mask.width * height - mask.height * width) > 0.01 * width * mask.height:
        raise EriDiffusionError(
            f"mask {mask_path} is {mask.width}x{mask.height}, but its image {image_path} is {width}x{height} "
            "(as shown, after its EXIF orientation): export the mask at the image's size."
        )
    histogram = mask.histogram()  # (an 8-bit mask: 256 counts)
    return sum(value * count for value, count in enumerate(histogram)) / (255 * mask.width * mask.height)


def media_sha256(path):
    """sha256 digest of an image's or clip's bytes, or of a frame folder's frame names and bytes in order."""
    if not os.path.isdir(path):
        return file_sha256(path)
    digest = hashlib.sha256()
    for name in frame_folder_files(path)[0]:
        digest.update(length_prefixed(name.encode()))
        digest.update(file_sha256(os.path.join(path, name)))
    return digest.digest()


def file_sha256(path):
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as file:
            for chunk in iter(lambda: file.read(1 << 20), b""):
                digest.update(chunk)
    except FileNotFoundError:
        raise EriDiffusionError(
            f"{path} was removed after the dataset was loaded; put it back or reload the dataset."
        ) from None
    return digest.digest()


def length_prefixed(data):
    return len(data).to_bytes(8, "little") + data


def mirrored(image, mirror):
    return ImageOps.mirror(image) if mirror else image
