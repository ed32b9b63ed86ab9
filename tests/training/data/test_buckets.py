"""Aspect-ratio buckets: the size list, the bucket an image lands in, and fit-and-crop on real photos."""

import math
import os

import pytest
from PIL import Image

from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.data.buckets import bucket_for, bucket_sizes, crop_to_bucket, fit_to_bucket


@pytest.fixture
def photo(datasets_dir):
    with Image.open(os.path.join(datasets_dir, "dreambooth_dog", "00.jpg")) as image:
        return image.convert("RGB")  # 780x780


@pytest.mark.parametrize("resolution", [256, 512, 768, 1024, 1536])
def test_buckets_are_step_multiples_within_area_and_aspect(resolution):
    sizes = bucket_sizes(resolution)
    assert sizes
    for width, height in sizes:
        assert width % 64 == 0 and height % 64 == 0
        assert width * height <= resolution**2
        assert 1 / 4.0 <= width / height <= 4.0


@pytest.mark.parametrize("resolution", [512, 1024])
def test_no_bucket_side_can_grow_a_step_without_passing_the_area(resolution):
    for width, height in bucket_sizes(resolution):
        assert (width + 64) * height > resolution**2
        assert width * (height + 64) > resolution**2


def test_bucket_list_for_256_is_exact():
    assert bucket_sizes(256) == [(128, 512), (192, 320), (256, 256), (320, 192), (512, 128)]


def test_bucket_list_for_1024_is_exact():
    assert bucket_sizes(1024) == [
        (512, 2048),
        (576, 1792),
        (640, 1600),
        (704, 1472),
        (768, 1344),
        (832, 1216),
        (896, 1152),
        (960, 1088),
        (1024, 1024),
        (1088, 960),
        (1152, 896),
        (1216, 832),
        (1344, 768),
        (1472, 704),
        (1600, 640),
        (1792, 576),
        (2048, 512),
    ]


def test_buckets_are_symmetric_and_hold_the_square():
    sizes = bucket_sizes(768)
    assert (768, 768) in sizes
    assert sorted((h, w) for w, h in sizes) == sorted(sizes)


def test_max_aspect_limits_the_list():
    assert bucket_sizes(1024, max_aspect=1.5) == [
        (832, 1216),
        (896, 1152),
        (960, 1088),
        (1024, 1024),
        (1088, 960),
        (1152, 896),
        (1216, 832),
    ]
    assert bucket_sizes(1024, max_aspect=1.0) == [(1024, 1024)]


def test_other_step_gives_multiples_of_that_step():
    sizes = bucket_sizes(512, step=32)
    assert (512, 512) in sizes
    assert all(w % 32 == 0 and h % 32 == 0 and w * h <= 512**2 for w, h in sizes)
    assert any(w % 64 for w, h in sizes)


@pytest.mark.parametrize("resolution", [1000, 1030])
def test_resolution_off_the_step_names_value_and_fix(resolution):
    lower = resolution // 64 * 64
    message = rf"resolution {resolution} is not a multiple of the bucket step 64; use {lower} or {lower + 64}"
    with pytest.raises(EriDiffusionError, match=message):
        bucket_sizes(resolution)


def test_max_aspect_below_one_is_refused():
    with pytest.raises(EriDiffusionError, match="max_aspect 0.5 must be >= 1"):
        bucket_sizes(1024, max_aspect=0.5)


def test_square_image_picks_the_square_bucket():
    assert bucket_for(780, 780, 1024) == (1024, 1024)
    assert bucket_for(300, 300, 512) == (512, 512)


def test_two_to_one_image_picks_the_nearest_wide_bucket():
    assert bucket_for(2000, 1000, 1024) == (1472, 704)
    assert bucket_for(1000, 2000, 1024) == (704, 1472)


def test_bucket_for_is_nearest_in_log_aspect():
    width, height = 1600, 900
    chosen = bucket_for(width, height, 1024)
    distance = lambda size: abs(math.log(size[0] / size[1]) - math.log(width / height))
    assert chosen == (1344, 768)
    assert all(distance(chosen) <= distance(size) for size in bucket_sizes(1024))


def test_image_wider_than_max_aspect_gets_the_widest_bucket():
    assert bucket_for(5000, 500, 1024) == (2048, 512)


def test_bucket_for_refuses_a_zero_size():
    with pytest.raises(EriDiffusionError, match="image size 0x100"):
        bucket_for(0, 100, 1024)


def test_fit_to_bucket_crops_a_wide_photo_to_the_bucket_centered(photo):
    wide = photo.crop((0, 190, 780, 580))  # 780x390, 2:1
    bucket = bucket_for(*wide.size, 1024)
    fitted, box = fit_to_bucket(wide, bucket)
    assert bucket == (1472, 704)
    assert fitted.size == (1472, 704)
    # width 780 -> 1472 sets the scale; height 390 -> 736, 32 px cropped, 16 each side
    assert box == (0, 16, 1472, 720)
    resized = wide.resize((1472, 736), Image.Resampling.LANCZOS)
    assert list(fitted.get_flattened_data()) == list(resized.crop(box).get_flattened_data())


def test_fit_to_bucket_crops_a_tall_photo_left_and_right_equally(photo):
    tall = photo.crop((200, 0, 500, 780))  # 300x780
    fitted, (left, top, right, bottom) = fit_to_bucket(tall, (512, 1152))
    assert fitted.size == (512, 1152)
    # width 300 -> 512 sets the scale (x1.707); height 780 -> 1331, so 179 px cropped, 89 on top
    assert (top, right - left, bottom - top) == ((1331 - 1152) // 2, 512, 1152)
    assert left == 0


def test_fit_to_bucket_of_square_photo_into_square_bucket_has_no_crop(photo):
    fitted, box = fit_to_bucket(photo, (512, 512))
    assert fitted.size == (512, 512)
    assert box == (0, 0, 512, 512)


def test_fit_to_bucket_keeps_an_exact_size_image_untouched(photo):
    fitted, box = fit_to_bucket(photo.crop((0, 0, 640, 384)), (640, 384))
    assert box == (0, 0, 640, 384)
    assert list(fitted.get_flattened_data()) == list(photo.crop((0, 0, 640, 384)).get_flattened_data())


@pytest.mark.parametrize("size, bucket", [((192, 144), (128, 128)), ((781, 781), (192, 64)), ((100, 300), (64, 256))])
def test_crop_to_bucket_gives_the_box_fit_to_bucket_crops_without_decoding(size, bucket):
    image = Image.new("RGB", size)
    fitted, box = fit_to_bucket(image, bucket)
    assert crop_to_bucket(size, bucket)[1] == box
    assert fitted.size == bucket
