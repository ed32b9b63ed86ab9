"""Short real video clips made from the DreamBooth photos (a slow pan and zoom over each), written
with PyAV, for the tests and benchmarks of video families: no video can be downloaded here."""

import os
import shutil

from devkit.pyav import pyav

CLIP_FRAMES = 9  # the tiny video models' VAEs take 4k+1 frames
CLIP_SIZE = (192, 144)  # width, height of the written clips: 4:3, so the center crop shows


def pan_and_zoom(photo_path, count, size=CLIP_SIZE):
    """`count` RGB frames of a slow left-to-right pan with a gentle zoom-in over a real photo."""
    from PIL import Image

    with Image.open(photo_path) as stored:
        photo = stored.convert("RGB")
    width, height = photo.size
    frames = []
    for k in range(count):
        progress = k / max(1, count - 1)
        zoom = 1.0 + 0.2 * progress
        crop_w = width * 0.8 / zoom
        crop_h = crop_w * size[1] / size[0]
        center_x = width * (0.42 + 0.16 * progress)
        left = min(max(0.0, center_x - crop_w / 2), width - crop_w)
        top = (height - crop_h) / 2
        frames.append(photo.resize(size, Image.Resampling.BICUBIC, box=(left, top, left + crop_w, top + crop_h)))
    return frames


def write_video(path, images, fps):
    """Write PIL images as a clip with PyAV: H.264 in .mp4/.mov, VP9 in .webm."""
    from fractions import Fraction

    av = pyav()

    codec = "libvpx-vp9" if str(path).endswith(".webm") else "libx264"
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=Fraction(fps).limit_denominator(1001))
        stream.width, stream.height = images[0].size
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": "12"} if codec == "libx264" else {}
        for image in images:
            for packet in stream.encode(av.VideoFrame.from_image(image)):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def write_gif(path, images, fps):
    images[0].save(path, save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)


def write_frame_folder(folder, images):
    """frame_1.png, frame_2.png … (unpadded numbers, so only number order reads them right)."""
    os.makedirs(folder, exist_ok=True)
    for k, image in enumerate(images, start=1):
        image.save(os.path.join(folder, f"frame_{k}.png"))


def write_dog_clips(photos, folder):
    """A clip dataset folder from the DreamBooth photos in `photos`: 00.mp4 (24 fps), 01.mp4 (30 fps),
    02/ (a frame folder), 03.gif (20 fps) and 04.mp4 (24 fps), each captioned with its photo's caption."""
    os.makedirs(folder, exist_ok=True)
    writers = {
        "00.mp4": (24, write_video),
        "01.mp4": (30, write_video),
        "02": (16, None),
        "03.gif": (20, write_gif),
        "04.mp4": (24, write_video),
    }
    for name, (fps, write) in writers.items():
        stem = name.split(".")[0]
        frames = pan_and_zoom(os.path.join(photos, f"{stem}.jpg"), count=16 if write else 12)
        if write is None:
            write_frame_folder(os.path.join(folder, name), frames)
        else:
            write(os.path.join(folder, name), frames, fps)
        shutil.copy(os.path.join(photos, f"{stem}.txt"), os.path.join(folder, f"{stem}.txt"))
    return folder


def start_photo(width, height, name="00.jpg"):
    """A DreamBooth dog photo as a (1, height, width, 3) IMAGE in [0, 1] (resized, center-cropped): the
    start image of image-to-video samples."""
    import numpy as np
    import torch
    from PIL import Image, ImageOps

    from devkit.paths import shared_datasets

    with Image.open(os.path.join(shared_datasets(), "dreambooth_dog", name)) as stored:
        photo = ImageOps.fit(stored.convert("RGB"), (width, height), Image.Resampling.BICUBIC)
    return torch.from_numpy(np.asarray(photo, dtype=np.float32) / 255.0)[None]


def write_video_with_sound(path, images, fps, stereo, rate):
    """Write PIL images as H.264 and float (samples, 2) `stereo` audio at `rate` as AAC into one .mp4."""
    from fractions import Fraction

    av = pyav()
    import numpy as np

    with av.open(str(path), "w") as container:
        video = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001))
        video.width, video.height = images[0].size
        video.pix_fmt, video.options = "yuv420p", {"crf": "12"}
        audio = container.add_stream("aac", rate=rate, layout="stereo")
        for image in images:
            container.mux(video.encode(av.VideoFrame.from_image(image)))
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(stereo.T, dtype=np.float32), format="fltp", layout="stereo"
        )
        frame.sample_rate = rate
        container.mux(audio.encode(frame))
        container.mux(video.encode())
        container.mux(audio.encode(None))


def write_dog_clips_with_sound(photos, folder, count=4, fps=16):
    """A clip dataset of mp4 files with sound: the DreamBooth photos' pans (as write_dog_clips) each with
    a synthesized music track (devkit/music_clips.py: ambient and rock in turn), captioned with its
    photo's caption and the music's style."""
    from devkit.music_clips import RATE, STYLES, synthesize

    os.makedirs(folder, exist_ok=True)
    for k in range(count):
        style = sorted(STYLES)[k % len(STYLES)]
        stereo = synthesize(style, k, seconds=1.5)[0]
        frames = pan_and_zoom(os.path.join(photos, f"{k:02d}.jpg"), count=24)
        write_video_with_sound(os.path.join(folder, f"{k:02d}.mp4"), frames, fps, stereo, RATE)
        with open(os.path.join(photos, f"{k:02d}.txt"), encoding="utf-8") as f:
            caption = f.read().strip()
        with open(os.path.join(folder, f"{k:02d}.txt"), "w", encoding="utf-8") as f:
            f.write(f"{caption}, {STYLES[style][0]}")
    return folder
