"""Video clips in a dataset: decoding to a frame count at a frame rate (mp4, webm, mov, gif, frame
folders), and the errors a bad clip gives; on clips made from the real DreamBooth photos and on
synthetic clips whose frame k is a flat gray of level 5k, so a decoded frame tells its index."""

import os
import shutil

import numpy as np
import pytest
from PIL import Image

from devkit.photo_clips import CLIP_FRAMES, CLIP_SIZE, pan_and_zoom, write_frame_folder, write_gif, write_video
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.media import VideoOptions, check_frames_for_vae, read_clip

LEVEL_STEP = 5  # gray level between consecutive frames: far above codec error on flat frames


def numbered_frames(count, size=(96, 64)):
    return [Image.new("RGB", size, (LEVEL_STEP * k,) * 3) for k in range(count)]


def frame_indices(frames):
    """Which numbered frame each decoded frame is (its mean gray level over LEVEL_STEP, rounded)."""
    return [round(float(np.asarray(frame, dtype=np.float32).mean()) / LEVEL_STEP) for frame in frames]


def caption(folder, stem, text="a photo of sks dog"):
    (folder / f"{stem}.txt").write_text(text, encoding="utf-8")


# --- decoding -------------------------------------------------------------------------------


def test_dog_clips_load_as_five_captioned_clips_with_their_frame_size(dog_clips, datasets_dir):
    names = [os.path.basename(r.path) for r in dog_clips.records]
    assert names == ["00.mp4", "01.mp4", "02", "03.gif", "04.mp4"]
    assert all(r.clip and (r.width, r.height) == CLIP_SIZE for r in dog_clips.records)
    with open(os.path.join(datasets_dir, "dreambooth_dog", "03.txt"), encoding="utf-8") as file:
        assert dog_clips.records[3].caption == file.read().strip()
    assert (dog_clips.video.frames, dog_clips.video.fps) == (CLIP_FRAMES, 16.0)


@pytest.mark.parametrize("name", ["00.mp4", "02", "03.gif"])
def test_dog_clip_decodes_to_the_frame_count_and_pans(dog_clips, name):
    frames = read_clip(os.path.join(dog_clips.folder, name), dog_clips.video)
    assert len(frames) == CLIP_FRAMES
    assert {frame.size for frame in frames} == {CLIP_SIZE}
    first, last = (np.asarray(f, dtype=np.float32) for f in (frames[0], frames[-1]))
    assert np.abs(first - last).mean() > 5.0  # the camera moved: not one frame repeated


def test_mp4_at_32_fps_sampled_at_16_fps_takes_every_second_frame(tmp_path):
    write_video(tmp_path / "clip.mp4", numbered_frames(40), 32)
    frames = read_clip(str(tmp_path / "clip.mp4"), VideoOptions(frames=9, fps=16))
    assert frame_indices(frames) == [0, 2, 4, 6, 8, 10, 12, 14, 16]


def test_mp4_at_30_fps_sampled_at_16_fps_takes_the_frame_on_screen_at_each_time(tmp_path):
    write_video(tmp_path / "clip.mp4", numbered_frames(40), 30)
    frames = read_clip(str(tmp_path / "clip.mp4"), VideoOptions(frames=9, fps=16))
    assert frame_indices(frames) == [30 * k // 16 for k in range(9)]  # [0, 1, 3, 5, 7, 9, 11, 13, 15]


def test_fps_zero_takes_consecutive_frames(tmp_path):
    write_video(tmp_path / "clip.mp4", numbered_frames(20), 30)
    frames = read_clip(str(tmp_path / "clip.mp4"), VideoOptions(frames=5, fps=0))
    assert frame_indices(frames) == [0, 1, 2, 3, 4]


def test_gif_at_20_fps_sampled_at_16_fps(tmp_path):
    write_gif(tmp_path / "clip.gif", numbered_frames(20), 20)
    frames = read_clip(str(tmp_path / "clip.gif"), VideoOptions(frames=9, fps=16))
    assert frame_indices(frames) == [20 * k // 16 for k in range(9)]  # [0, 1, 2, 3, 5, 6, 7, 8, 10]


@pytest.mark.parametrize("name", ["clip.webm", "clip.mov"])
def test_webm_and_mov_decode(tmp_path, name):
    write_video(tmp_path / name, numbered_frames(12), 16)
    frames = read_clip(str(tmp_path / name), VideoOptions(frames=9, fps=16))
    assert frame_indices(frames) == list(range(9))
    assert frames[0].size == (96, 64)


def test_frame_folder_is_read_in_number_order(tmp_path):
    write_frame_folder(
        tmp_path / "walk", numbered_frames(12)
    )  # frame_1 … frame_12: frame_10 sorts before frame_2 as text
    frames = read_clip(str(tmp_path / "walk"), VideoOptions(frames=12, fps=16))
    assert frame_indices(frames) == list(range(12))


def test_clip_with_a_display_rotation_is_turned_upright(tmp_path):
    import av

    image = Image.new("RGB", (96, 64), (200, 0, 0))
    image.paste((0, 0, 200), (0, 0, 24, 24))  # a blue corner at the top left, as stored
    with av.open(str(tmp_path / "phone.mp4"), "w") as container:
        stream = container.add_stream("libx264", rate=16)
        stream.width, stream.height, stream.pix_fmt = 96, 64, "yuv420p"
        stream.set_display_rotation(90)  # show it turned 90 degrees counterclockwise
        for _ in range(9):
            for packet in stream.encode(av.VideoFrame.from_image(image)):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    frame = read_clip(str(tmp_path / "phone.mp4"), VideoOptions(frames=9, fps=16))[0]
    assert frame.size == (64, 96)
    red, _, blue = frame.getpixel((8, 88))  # the corner turned to the bottom left
    assert blue > 150 and red < 60


def test_clip_ends_exactly_at_the_last_wanted_frame(tmp_path):
    # 9 frames at 16 fps span 0.5 s plus the last frame's 1/16 s: a 0.5625 s clip at 16 fps is enough
    write_video(tmp_path / "clip.mp4", numbered_frames(9), 16)
    assert frame_indices(read_clip(str(tmp_path / "clip.mp4"), VideoOptions(frames=9, fps=16))) == list(range(9))


# --- errors ---------------------------------------------------------------------------------


def test_clip_shorter_than_the_frame_count_names_the_file_and_the_fix(tmp_path):
    write_video(tmp_path / "short.mp4", numbered_frames(12), 24)  # 0.5 s; 17 frames at 16 fps need 1.06 s
    caption(tmp_path, "short")
    with pytest.raises(
        EriDiffusionError,
        match=r"short\.mp4 is too short: it gives 8 of the 17 frames at 16 fps "
        r"\(1\.06 s\).*use a longer clip, lower LoadDataset's frames",
    ):
        load_dataset(str(tmp_path), frames=17, fps=16)


def test_frame_folder_with_too_few_frames_names_the_folder(tmp_path):
    write_frame_folder(tmp_path / "walk", numbered_frames(5))
    caption(tmp_path, "walk")
    with pytest.raises(EriDiffusionError, match=r"walk holds 5 frames, fewer than the 9 frames"):
        load_dataset(str(tmp_path), frames=9)


def test_clip_slower_than_the_asked_fps_is_refused(tmp_path):
    write_gif(tmp_path / "slow.gif", numbered_frames(30), 5)
    caption(tmp_path, "slow")
    with pytest.raises(
        EriDiffusionError,
        match=r"slow\.gif is 5 fps, slower than the fps 16.*set LoadDataset's fps "
        r"to 5 or lower",
    ):
        load_dataset(str(tmp_path), frames=9, fps=16)


@pytest.mark.parametrize("damage", ["truncated", "text"])
def test_corrupt_clip_names_the_file_and_the_fix(tmp_path, damage):
    path = tmp_path / "bad.mp4"
    if damage == "truncated":
        write_video(path, numbered_frames(30), 16)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
    else:
        path.write_text("not a video", encoding="utf-8")
    caption(tmp_path, "bad")
    with pytest.raises(EriDiffusionError, match=r"bad\.mp4 (cannot be decoded as a video|is too short)"):
        load_dataset(str(tmp_path), frames=9, fps=16)


def test_clip_without_caption_names_the_caption_file_to_write(tmp_path):
    write_video(tmp_path / "walk.mp4", numbered_frames(12), 16)
    with pytest.raises(EriDiffusionError, match=r"walk\.mp4 has no caption; write walk\.txt beside it"):
        load_dataset(str(tmp_path), frames=9)


def test_frame_folder_without_caption_says_it_is_read_as_a_clip(tmp_path):
    write_frame_folder(tmp_path / "walk", numbered_frames(12))
    with pytest.raises(
        EriDiffusionError,
        match=r"walk \(a frame folder, read as one clip\) has no caption; "
        r"write walk\.txt beside it",
    ):
        load_dataset(str(tmp_path), frames=9)


def test_captioned_frame_folder_with_a_stray_file_names_it(tmp_path):
    write_frame_folder(tmp_path / "walk", numbered_frames(12))
    (tmp_path / "walk" / "notes.pdf").write_bytes(b"%PDF-1.4")
    caption(tmp_path, "walk")
    with pytest.raises(EriDiffusionError, match=r"notes\.pdf is not a frame of the frame folder"):
        load_dataset(str(tmp_path), frames=9)


def test_frame_folder_mixing_sizes_is_refused(tmp_path):
    frames = numbered_frames(9)
    frames[4] = frames[4].resize((100, 64))
    write_frame_folder(tmp_path / "walk", frames)
    caption(tmp_path, "walk")
    with pytest.raises(EriDiffusionError, match=r"walk mixes frame sizes \(100x64, 96x64\)"):
        load_dataset(str(tmp_path), frames=9)


@pytest.mark.parametrize(
    "frames, temporal, message",
    [
        (16, 4, r"takes 4k\+1 frames .*set LoadDataset's frames to 13 or 17"),
        (20, 8, r"takes 8k\+1 frames .*set LoadDataset's frames to 17 or 25"),
    ],
)
def test_frame_count_off_the_vae_rule_names_the_rule(frames, temporal, message):
    with pytest.raises(EriDiffusionError, match=message):
        check_frames_for_vae(frames, temporal, "dataset x")


@pytest.mark.parametrize("frames", [1, 5, 9, 17, 81])
def test_four_k_plus_one_frame_counts_fit_a_4x_vae(frames):
    check_frames_for_vae(frames, 4, "dataset x")


@pytest.mark.parametrize("frames, fps", [(0, 16), (9, -1), (9, 500)])
def test_bad_frame_settings_are_refused(frames, fps):
    with pytest.raises(EriDiffusionError, match="frames|fps"):
        VideoOptions(frames=frames, fps=fps)


# --- images unchanged, fingerprints -----------------------------------------------------------


def test_image_dataset_fingerprint_ignores_the_frame_settings(datasets_dir):
    folder = os.path.join(datasets_dir, "dreambooth_dog")
    assert load_dataset(folder, frames=9).fingerprint() == load_dataset(folder, frames=17, fps=24).fingerprint()


def test_clip_dataset_fingerprint_follows_the_frame_settings_and_frame_bytes(dog_clips, tmp_path):
    folder = tmp_path / "clips"
    shutil.copytree(dog_clips.folder, folder)
    first = load_dataset(str(folder), frames=9).fingerprint()
    assert load_dataset(str(folder), frames=9).fingerprint() == first
    assert load_dataset(str(folder), frames=5).fingerprint() != first
    pan_and_zoom(os.path.join(folder, "02", "frame_1.png"), 1)[0].save(folder / "02" / "frame_3.png")
    assert load_dataset(str(folder), frames=9).fingerprint() != first
