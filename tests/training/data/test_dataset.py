"""Dataset scanning and image loading, on the real DreamBooth photos and odd cases derived from
them in a temp dir (EXIF rotation, odd color modes, corrupt files, stray files, metadata.jsonl)."""

import json
import os
import re
import shutil

import pytest
from PIL import Image

from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.data.captions import CaptionOptions, caption_variants
from eridiffusion.training.data.dataset import Dataset, load_dataset
from eridiffusion.training.data.media import open_image_rgb

DOG_SIZES = {
    "00.jpg": (780, 780),
    "01.jpg": (781, 781),
    "02.jpg": (780, 780),
    "03.jpg": (780, 780),
    "04.jpg": (687, 687),
}


@pytest.fixture
def dog_dir(datasets_dir):
    return os.path.join(datasets_dir, "dreambooth_dog")


@pytest.fixture
def dog_copy(dog_dir, tmp_path):
    """A writable copy of the dog photos and their captions."""
    folder = tmp_path / "dog"
    shutil.copytree(dog_dir, folder)
    return folder


def _caption(dog_dir, stem):
    with open(os.path.join(dog_dir, f"{stem}.txt"), encoding="utf-8") as file:
        return file.read().strip()


def _photo(dog_dir, box=(200, 100, 520, 340)):
    """A non-square RGB crop of a real photo (320x240 by default)."""
    with Image.open(os.path.join(dog_dir, "00.jpg")) as image:
        return image.convert("RGB").crop(box)


def _only(folder, *names):
    """Remove from folder everything except the given names."""
    for name in os.listdir(folder):
        if name not in names:
            os.remove(os.path.join(folder, name))


def _pixels(image):
    return list(image.get_flattened_data())


# --- load_dataset on the real photos -------------------------------------------------------


def test_load_dataset_pairs_each_photo_with_its_caption_and_size(dog_dir):
    dataset = load_dataset(dog_dir)
    assert [os.path.basename(r.path) for r in dataset.records] == sorted(DOG_SIZES)
    for record in dataset.records:
        name = os.path.basename(record.path)
        assert record.caption == _caption(dog_dir, name[:2])
        assert (record.width, record.height) == DOG_SIZES[name]
        assert record.path == os.path.join(os.path.abspath(dog_dir), name)
    assert dataset.folder == os.path.abspath(dog_dir)
    assert dataset.repeats == 1
    assert dataset.captions == CaptionOptions()


def test_load_dataset_stores_caption_options_and_repeats(dog_dir):
    dataset = load_dataset(dog_dir, trigger_word="sks", caption_dropout=0.1, shuffle_tags=True, keep_tags=2, repeats=3)
    assert dataset.captions == CaptionOptions(trigger_word="sks", dropout_rate=0.1, shuffle_tags=True, keep_tags=2)
    assert dataset.repeats == 3


def test_trigger_word_already_in_caption_is_not_repeated_whatever_its_case(dog_dir):
    dataset = load_dataset(dog_dir, trigger_word="SKS")
    assert dataset.records[0].caption == _caption(dog_dir, "00")


def test_trigger_word_absent_from_caption_is_prepended(dog_dir):
    dataset = load_dataset(dog_dir, trigger_word="ohwx")
    assert dataset.records[1].caption == "ohwx, " + _caption(dog_dir, "01")


def test_trigger_word_inside_another_word_does_not_count_as_present(dog_copy):
    (dog_copy / "00.txt").write_text("a photo of sksdog", encoding="utf-8")
    dataset = load_dataset(dog_copy, trigger_word="sks")
    assert dataset.records[0].caption == "sks, a photo of sksdog"


def test_records_are_sorted_by_file_name(dog_copy, dog_dir):
    _only(dog_copy)
    photo = _photo(dog_dir)
    for name in ("b.png", "10.jpg", "a.webp", "2.jpeg"):
        photo.save(dog_copy / name)
        (dog_copy / f"{os.path.splitext(name)[0]}.txt").write_text(name, encoding="utf-8")
    dataset = load_dataset(dog_copy)
    assert [os.path.basename(r.path) for r in dataset.records] == ["10.jpg", "2.jpeg", "a.webp", "b.png"]
    assert [r.caption for r in dataset.records] == ["10.jpg", "2.jpeg", "a.webp", "b.png"]


def test_uppercase_image_extension_is_read(dog_copy):
    os.rename(dog_copy / "00.jpg", dog_copy / "00.JPG")
    dataset = load_dataset(dog_copy)
    assert os.path.basename(dataset.records[0].path) == "00.JPG"


@pytest.mark.parametrize("caption_ext", [".caption", "caption"])
def test_caption_extension_works_with_or_without_dot(dog_copy, dog_dir, caption_ext):
    for stem in ("00", "01", "02", "03", "04"):
        os.rename(dog_copy / f"{stem}.txt", dog_copy / f"{stem}.caption")
    dataset = load_dataset(dog_copy, caption_ext=caption_ext)
    assert dataset.records[4].caption == _caption(dog_dir, "04")


def test_caption_file_is_read_as_utf8_and_stripped(dog_copy):
    (dog_copy / "02.txt").write_text("  ein Foto von sks Hund, Kühe im Hintergrund  \n\n", encoding="utf-8")
    assert load_dataset(dog_copy).records[2].caption == "ein Foto von sks Hund, Kühe im Hintergrund"


def test_hidden_files_and_subfolders_are_ignored(dog_copy, dog_dir):
    (dog_copy / ".DS_Store").write_bytes(b"\0\1\2")
    (dog_copy / "rejects").mkdir()
    _photo(dog_dir).save(dog_copy / "rejects" / "05.jpg")
    (dog_copy / "rejects" / "notes.pdf").write_bytes(b"%PDF-1.4")
    assert len(load_dataset(dog_copy).records) == 5


# --- captions that are missing or stray ------------------------------------------------------


def test_missing_caption_names_image_and_the_caption_file_to_write(dog_copy):
    os.remove(dog_copy / "03.txt")
    with pytest.raises(EriDiffusionError, match=r"03\.jpg has no caption; write 03\.txt"):
        load_dataset(dog_copy)


def test_empty_caption_file_is_named_as_empty(dog_copy):
    (dog_copy / "01.txt").write_text("  \n", encoding="utf-8")
    with pytest.raises(EriDiffusionError, match=r"01\.txt, the caption of .*01\.jpg, is empty; write the caption"):
        load_dataset(dog_copy)


def test_missing_caption_uses_trigger_word_when_asked(dog_copy, dog_dir):
    os.remove(dog_copy / "03.txt")
    dataset = load_dataset(dog_copy, trigger_word="sks", missing_caption="trigger_word")
    expected = [_caption(dog_dir, stem) for stem in ("00", "01", "02")] + ["sks", _caption(dog_dir, "04")]
    assert [r.caption for r in dataset.records] == expected


def test_trigger_word_mode_without_trigger_word_is_refused(dog_dir):
    with pytest.raises(EriDiffusionError, match="trigger_word is empty"):
        load_dataset(dog_dir, missing_caption="trigger_word")


def test_unknown_missing_caption_mode_is_refused(dog_dir):
    with pytest.raises(EriDiffusionError, match="'skip'"):
        load_dataset(dog_dir, missing_caption="skip")


def test_caption_without_image_is_named(dog_copy):
    (dog_copy / "07.txt").write_text("a photo of sks dog", encoding="utf-8")
    with pytest.raises(EriDiffusionError, match=r"07\.txt has no image beside it"):
        load_dataset(dog_copy)


def test_two_images_sharing_a_stem_are_refused(dog_copy, dog_dir):
    _photo(dog_dir).save(dog_copy / "00.png")
    with pytest.raises(EriDiffusionError, match=r"00\.jpg and .*00\.png share the name '00'"):
        load_dataset(dog_copy)


# --- files that do not belong ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["notes.pdf", "05.bmp"])
def test_stray_file_is_named_with_the_fix(dog_copy, dog_dir, name):
    if name.endswith(".bmp"):
        _photo(dog_dir).save(dog_copy / name)
    else:
        (dog_copy / name).write_bytes(b"%PDF-1.4\n")
    message = rf"{name} is not an image EriDiffusion reads.*convert it to png/jpg/webp"
    with pytest.raises(EriDiffusionError, match=message):
        load_dataset(dog_copy)


def test_truncated_jpeg_is_named_with_the_fix(dog_copy):
    data = (dog_copy / "02.jpg").read_bytes()
    (dog_copy / "02.jpg").write_bytes(data[: len(data) // 2])
    with pytest.raises(EriDiffusionError, match=r"02\.jpg cannot be read as an image.*re-export it"):
        load_dataset(dog_copy)


def test_text_file_with_image_extension_is_named(dog_copy):
    (dog_copy / "04.jpg").write_text("not really a photo", encoding="utf-8")
    with pytest.raises(EriDiffusionError, match=r"04\.jpg cannot be read as an image"):
        load_dataset(dog_copy)


def test_image_below_min_side_is_named_with_its_size(dog_copy, dog_dir):
    _photo(dog_dir).resize((80, 40)).save(dog_copy / "05.png")
    (dog_copy / "05.txt").write_text("a photo of sks dog", encoding="utf-8")
    with pytest.raises(EriDiffusionError, match=r"05\.png is 80x40, smaller than 64 pixels on its short side"):
        load_dataset(dog_copy)
    assert len(load_dataset(dog_copy, min_side=40).records) == 6


# --- folder and option errors ----------------------------------------------------------------


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(EriDiffusionError, match=re.escape(f"{tmp_path / 'nowhere'} does not exist")):
        load_dataset(tmp_path / "nowhere")


def test_file_given_as_folder_is_refused(dog_dir):
    path = os.path.join(dog_dir, "00.jpg")
    with pytest.raises(EriDiffusionError, match=re.escape(f"{path} is a file, not a folder")):
        load_dataset(path)


def test_folder_without_images_lists_supported_formats(tmp_path):
    with pytest.raises(EriDiffusionError, match=r"no images in .*; supported: jpg, jpeg, png, webp"):
        load_dataset(tmp_path)


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("repeats", 0, r"LoadDataset: repeats must be between 1 and 1000 \(got 0\)"),
        ("caption_dropout", 1.5, r"LoadDataset: caption_dropout must be between 0 and 1 \(got 1.5\)"),
        ("keep_tags", -1, r"LoadDataset: keep_tags must be between 0 and 64 \(got -1\)"),
        ("min_side", 0, "min_side 0 must be"),
        ("caption_ext", ".png", "is an image extension"),
        ("caption_ext", "", "is not a file extension"),
    ],
)
def test_bad_option_is_refused_by_name(dog_dir, option, value, message):
    with pytest.raises(EriDiffusionError, match=message):
        load_dataset(dog_dir, **{option: value})


# --- metadata.jsonl --------------------------------------------------------------------------


def _write_metadata(folder, lines):
    (folder / "metadata.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_metadata_jsonl_supplies_captions_and_caption_files_are_ignored(dog_copy):
    lines = [json.dumps({"file_name": f"0{i}.jpg", "text": f"dog number {i}"}) for i in range(4)]
    _write_metadata(dog_copy, lines + ["", json.dumps({"file_name": "04.jpg", "caption": "dog number 4"})])
    (dog_copy / "99.txt").write_text("orphan caption, ignored with metadata.jsonl", encoding="utf-8")
    dataset = load_dataset(dog_copy)
    assert [r.caption for r in dataset.records] == [f"dog number {i}" for i in range(5)]


def test_metadata_jsonl_may_name_an_image_in_a_subfolder(dog_copy, dog_dir):
    _only(dog_copy, "00.jpg")
    (dog_copy / "extra").mkdir()
    _photo(dog_dir).save(dog_copy / "extra" / "05.png")
    _write_metadata(
        dog_copy, ['{"file_name": "00.jpg", "text": "first"}', '{"file_name": "extra/05.png", "text": "second"}']
    )
    dataset = load_dataset(dog_copy)
    assert [(r.path, r.caption, r.width, r.height) for r in dataset.records] == [
        (str(dog_copy / "00.jpg"), "first", 780, 780),
        (str(dog_copy / "extra" / "05.png"), "second", 320, 240),
    ]


def test_metadata_line_naming_missing_file_gives_line_number(dog_copy):
    _write_metadata(dog_copy, ['{"file_name": "00.jpg", "text": "a"}', '{"file_name": "gone.jpg", "text": "b"}'])
    with pytest.raises(EriDiffusionError, match=r"metadata\.jsonl line 2 names gone\.jpg, which is not in"):
        load_dataset(dog_copy)


def test_metadata_bad_json_gives_line_number(dog_copy):
    _write_metadata(
        dog_copy,
        [
            '{"file_name": "00.jpg", "text": "a"}',
            '{"file_name": "01.jpg", "text": "b"}',
            '{"file_name": "02.jpg", text: c}',
        ],
    )
    with pytest.raises(EriDiffusionError, match=r"metadata\.jsonl line 3 is not valid JSON"):
        load_dataset(dog_copy)


def test_metadata_line_without_file_name_gives_line_number(dog_copy):
    _write_metadata(dog_copy, ['{"image": "00.jpg", "text": "a"}'])
    with pytest.raises(EriDiffusionError, match=r'metadata\.jsonl line 1 has no "file_name"'):
        load_dataset(dog_copy)


def test_metadata_naming_an_image_twice_gives_both_lines(dog_copy):
    _write_metadata(
        dog_copy,
        [
            '{"file_name": "00.jpg", "text": "a"}',
            '{"file_name": "01.jpg", "text": "b"}',
            '{"file_name": "00.jpg", "text": "c"}',
        ],
    )
    with pytest.raises(EriDiffusionError, match=r"line 3 names 00\.jpg again \(first on line 1\)"):
        load_dataset(dog_copy)


def test_metadata_escaping_the_folder_is_refused(dog_copy):
    _write_metadata(dog_copy, ['{"file_name": "../dog/00.jpg", "text": "a"}'])
    with pytest.raises(EriDiffusionError, match=r"line 1 names \.\./dog/00\.jpg, outside the dataset folder"):
        load_dataset(dog_copy)


def test_image_left_out_of_metadata_has_no_caption(dog_copy):
    _write_metadata(dog_copy, [json.dumps({"file_name": f"0{i}.jpg", "text": "dog"}) for i in (0, 1, 3, 4)])
    message = r"02\.jpg has no caption; add a line for it to metadata\.jsonl"
    with pytest.raises(EriDiffusionError, match=message):
        load_dataset(dog_copy)


def test_metadata_csv_is_refused_with_the_jsonl_format(dog_copy):
    (dog_copy / "metadata.csv").write_text("file_name,text\n00.jpg,a dog\n", encoding="utf-8")
    message = r"metadata\.csv: EriDiffusion reads captions from metadata\.jsonl"
    with pytest.raises(EriDiffusionError, match=message):
        load_dataset(dog_copy)


# --- open_image_rgb --------------------------------------------------------------------------


def test_exif_orientation_turns_the_image_upright(dog_copy, dog_dir):
    exif = Image.Exif()
    exif[0x0112] = 6  # stored rotated: the viewer turns it 90 degrees clockwise
    _photo(dog_dir).save(dog_copy / "00.jpg", exif=exif, quality=95)
    with Image.open(dog_copy / "00.jpg") as stored:
        upright = stored.convert("RGB").transpose(Image.Transpose.ROTATE_270)
    image = open_image_rgb(dog_copy / "00.jpg")
    assert image.size == (240, 320)
    assert _pixels(image) == _pixels(upright)
    record = load_dataset(dog_copy, min_side=64).records[0]
    assert (record.width, record.height) == (240, 320)


def test_rgba_is_composited_on_white(tmp_path, dog_dir):
    photo = _photo(dog_dir)
    rgba = photo.convert("RGBA")
    rgba.paste((0, 0, 0, 0), (0, 0, 160, 240))  # left half fully transparent black
    rgba.save(tmp_path / "a.png")
    image = open_image_rgb(tmp_path / "a.png")
    assert image.mode == "RGB"
    assert set(_pixels(image.crop((0, 0, 160, 240)))) == {(255, 255, 255)}
    assert _pixels(image.crop((160, 0, 320, 240))) == _pixels(photo.crop((160, 0, 320, 240)))


def test_half_transparent_pixel_blends_with_white(tmp_path):
    Image.new("RGBA", (4, 4), (0, 0, 0, 128)).save(tmp_path / "a.png")
    assert _pixels(open_image_rgb(tmp_path / "a.png"))[0] == (127, 127, 127)


def test_la_is_composited_on_white(tmp_path, dog_dir):
    la = _photo(dog_dir).convert("LA")
    la.putalpha(0)
    la.save(tmp_path / "a.png")
    assert set(_pixels(open_image_rgb(tmp_path / "a.png"))) == {(255, 255, 255)}


def test_palette_transparency_is_composited_on_white(tmp_path, dog_dir):
    palette = _photo(dog_dir).quantize(16)
    transparent = palette.getpixel((0, 0))
    palette.save(tmp_path / "a.png", transparency=transparent)
    colors = palette.getpalette()
    image = open_image_rgb(tmp_path / "a.png")
    for x, y in ((0, 0), (100, 100), (319, 239)):
        index = palette.getpixel((x, y))
        expected = (255, 255, 255) if index == transparent else tuple(colors[3 * index : 3 * index + 3])
        assert image.getpixel((x, y)) == expected
    assert image.getpixel((0, 0)) == (255, 255, 255)


def test_palette_without_transparency_keeps_its_colors(tmp_path, dog_dir):
    palette = _photo(dog_dir).quantize(16)
    palette.save(tmp_path / "a.png")
    assert _pixels(open_image_rgb(tmp_path / "a.png")) == _pixels(palette.convert("RGB"))


def test_grayscale_becomes_equal_rgb_channels(tmp_path, dog_dir):
    gray = _photo(dog_dir).convert("L")
    gray.save(tmp_path / "a.png")
    assert _pixels(open_image_rgb(tmp_path / "a.png")) == [(v, v, v) for v in _pixels(gray)]


def test_sixteen_bit_png_is_scaled_not_clipped(tmp_path, dog_dir):
    gray = _photo(dog_dir).convert("L")
    gray.convert("I").point(lambda v: v * 257).convert("I;16").save(tmp_path / "a.png")
    with Image.open(tmp_path / "a.png") as stored:
        assert stored.mode == "I;16"
    assert _pixels(open_image_rgb(tmp_path / "a.png")) == [(v, v, v) for v in _pixels(gray)]


def test_one_bit_image_becomes_black_and_white(tmp_path, dog_dir):
    bits = _photo(dog_dir).convert("1")
    bits.save(tmp_path / "a.png")
    expected = [(255, 255, 255) if v else (0, 0, 0) for v in _pixels(bits)]
    assert _pixels(open_image_rgb(tmp_path / "a.png")) == expected


def test_cmyk_jpeg_is_not_inverted(tmp_path):
    Image.new("CMYK", (64, 64), (0, 255, 255, 0)).save(tmp_path / "a.jpg", quality=100)
    red, green, blue = open_image_rgb(tmp_path / "a.jpg").getpixel((32, 32))
    assert red >= 250 and green <= 5 and blue <= 5


def test_open_image_rgb_names_corrupt_file(dog_copy):
    data = (dog_copy / "01.jpg").read_bytes()
    (dog_copy / "01.jpg").write_bytes(data[:2000])
    with pytest.raises(EriDiffusionError, match=r"01\.jpg cannot be read as an image"):
        open_image_rgb(dog_copy / "01.jpg")


# --- fingerprint -----------------------------------------------------------------------------


def test_fingerprint_of_the_dog_photos_is_fixed(dog_dir):
    assert load_dataset(dog_dir).fingerprint() == DOG_FINGERPRINT


def test_fingerprint_does_not_depend_on_where_the_folder_is(dog_dir, dog_copy):
    assert load_dataset(dog_copy).fingerprint() == load_dataset(dog_dir).fingerprint()


def test_fingerprint_does_not_depend_on_record_order(dog_dir):
    dataset = load_dataset(dog_dir)
    reordered = Dataset(
        folder=dataset.folder, records=dataset.records[::-1], captions=dataset.captions, repeats=dataset.repeats
    )
    assert reordered.fingerprint() == dataset.fingerprint()


def test_fingerprint_changes_with_a_caption(dog_dir, dog_copy):
    (dog_copy / "04.txt").write_text(_caption(dog_dir, "04") + ", sunny", encoding="utf-8")
    assert load_dataset(dog_copy).fingerprint() != load_dataset(dog_dir).fingerprint()


def test_fingerprint_changes_with_image_bytes(dog_dir, dog_copy):
    with open(dog_copy / "00.jpg", "ab") as file:
        file.write(b"\0")  # after the JPEG end marker: same pixels, different file
    assert load_dataset(dog_copy).fingerprint() != load_dataset(dog_dir).fingerprint()


def test_fingerprint_changes_with_a_renamed_image(dog_dir, dog_copy):
    os.rename(dog_copy / "04.jpg", dog_copy / "05.jpg")
    os.rename(dog_copy / "04.txt", dog_copy / "05.txt")
    assert load_dataset(dog_copy).fingerprint() != load_dataset(dog_dir).fingerprint()


def test_fingerprint_changes_with_caption_options(dog_dir):
    assert load_dataset(dog_dir, shuffle_tags=True).fingerprint() != load_dataset(dog_dir).fingerprint()


# --- caption_variants ------------------------------------------------------------------------

CAPTION = "sks dog, corgi, red wall, blossoms, tongue out, close-up"


def test_caption_variants_without_shuffle_is_just_the_caption():
    assert caption_variants(CAPTION, CaptionOptions(), count=4, seed=0) == [CAPTION]


def test_caption_variants_shuffle_keeps_leading_tags_and_the_tag_set():
    options = CaptionOptions(shuffle_tags=True, keep_tags=2)
    variants = caption_variants(CAPTION, options, count=5, seed=7)
    tags = [t.strip() for t in CAPTION.split(",")]
    assert len(variants) == 5 and variants[0] == CAPTION
    for variant in variants[1:]:
        shuffled = variant.split(", ")
        assert shuffled[:2] == ["sks dog", "corgi"]
        assert sorted(shuffled) == sorted(tags)
    assert len(set(variants)) == 5


def test_caption_variants_are_fixed_by_the_seed():
    options = CaptionOptions(shuffle_tags=True, keep_tags=1)
    assert caption_variants(CAPTION, options, count=3, seed=0) == [
        CAPTION,
        "sks dog, blossoms, red wall, corgi, close-up, tongue out",
        "sks dog, corgi, blossoms, red wall, tongue out, close-up",
    ]
    assert caption_variants(CAPTION, options, count=3, seed=1) != caption_variants(CAPTION, options, count=3, seed=0)


def test_caption_variants_keep_zero_moves_every_tag():
    variants = caption_variants("a, b, c, d", CaptionOptions(shuffle_tags=True, keep_tags=0), count=6, seed=3)
    assert variants == ["a, b, c, d", "d, a, c, b", "a, b, d, c", "b, d, c, a", "c, a, b, d", "a, d, c, b"]


def test_caption_variants_refuses_zero_count():
    with pytest.raises(EriDiffusionError, match="count 0"):
        caption_variants(CAPTION, CaptionOptions(), count=0, seed=0)


DOG_FINGERPRINT = "32fdf6bb0d845edee78f5bb4e5646ca374ed0f3edef365a9dae63a181fa9e679"


# --- entries that are not what their names say ----------------------------------------------


def test_a_symbolic_link_that_loops_is_named(dog_copy):
    os.symlink(dog_copy / "loop", dog_copy / "loop")
    with pytest.raises(EriDiffusionError, match=re.escape(f"{dog_copy / 'loop'} is a symbolic link that cannot be")):
        load_dataset(dog_copy)


def test_a_caption_that_is_a_folder_is_called_a_folder(dog_copy):
    os.remove(dog_copy / "01.txt")
    os.mkdir(dog_copy / "01.txt")
    with pytest.raises(EriDiffusionError, match=re.escape(f"{dog_copy / '01.txt'} is a folder, not a caption file")):
        load_dataset(dog_copy)


def test_captions_under_another_extension_than_caption_ext_get_the_setting_to_change(dog_copy):
    with pytest.raises(EriDiffusionError, match=r"00\.txt looks like a caption file, but caption_ext is '\.md': set "):
        load_dataset(dog_copy, caption_ext=".md")
