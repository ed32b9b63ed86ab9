"""Issue 11, case 10 and the inputs that already held: what a user's odd or broken dataset does when
the workflow runs through ComfyUI's executor (the exact message, or a run that trains), a rank
wider than the layers, and ComfyUI's Cancel."""

import logging
import os
import re
import threading
import time

import pytest
from PIL import Image

from devkit.workflow import run_training
from eridiffusion.training.data.dataset import load_dataset

USE_TRIGGER = "or set missing_caption to 'use trigger word' to caption it with the trigger word."


def dataset_error(folder, run_name, **dataset_options):
    outcome = run_training(folder, run_name, dataset_options=dataset_options)
    assert not outcome.success
    assert not os.path.exists(outcome.run_dir)  # stopped before the trainer made its folder
    return outcome.error


def photo(folder, index=0):
    with Image.open(os.path.join(folder, f"{index:02d}.jpg")) as image:
        return image.convert("RGB").crop((200, 100, 520, 340))  # 320x240


@pytest.mark.parametrize("keep", [0, 2000], ids=["zero bytes", "truncated"])
def test_a_corrupt_or_truncated_image_is_named_with_the_fix(keep, registered, photos):
    folder = photos(2)
    image = folder / "01.jpg"
    image.write_bytes(image.read_bytes()[:keep])
    error = dataset_error(folder, f"corrupt_{keep}")
    assert error.startswith(f"EriDiffusion_LoadDataset: {image} cannot be read as an image (")
    assert error.endswith("); it is corrupt or truncated: re-export it from the original or remove it.")


def test_cmyk_sixteen_bit_alpha_palette_and_rotated_images_all_train(registered, photos):
    folder = photos(1)
    source = photo(folder)
    Image.new("CMYK", (96, 96), (0, 255, 255, 0)).save(folder / "cmyk.jpg", quality=100)
    source.convert("L").convert("I").point(lambda v: v * 257).convert("I;16").save(folder / "gray16.png")
    rgba = source.convert("RGBA")
    rgba.putalpha(128)
    rgba.save(folder / "alpha.png")
    source.convert("LA").save(folder / "la.png")
    source.quantize(16).save(folder / "palette.png", transparency=0)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: viewers turn it 90 degrees
    source.save(folder / "rotated.jpg", exif=exif)
    for stem in ("cmyk", "gray16", "alpha", "la", "palette", "rotated"):
        (folder / f"{stem}.txt").write_text("a photo of sks dog", encoding="utf-8")
    with Image.open(folder / "00.jpg") as original:
        original_size = original.size
    sizes = {os.path.basename(r.path): (r.width, r.height) for r in load_dataset(str(folder)).records}
    assert sizes == {
        "00.jpg": original_size,
        "cmyk.jpg": (96, 96),
        "gray16.png": (320, 240),
        "alpha.png": (320, 240),
        "la.png": (320, 240),
        "palette.png": (320, 240),
        "rotated.jpg": (240, 320),
    }  # upright by its EXIF orientation
    outcome = run_training(folder, "odd_formats")
    assert outcome.success, outcome.error
    assert len(outcome.losses()) == 2


def test_two_images_sharing_a_stem_are_named(registered, photos):
    folder = photos(2)
    photo(folder).save(folder / "00.png")
    assert dataset_error(folder, "duplicate_stems") == (
        f"EriDiffusion_LoadDataset: {folder / '00.jpg'} and {folder / '00.png'} share the name '00', so 00.txt would "
        "caption both; rename one of them."
    )


def test_metadata_naming_a_file_outside_the_folder_is_refused(registered, photos):
    folder = photos(1)
    (folder / "metadata.jsonl").write_text('{"file_name": "../outside.jpg", "text": "a dog"}\n', encoding="utf-8")
    assert dataset_error(folder, "traversal") == (
        f"EriDiffusion_LoadDataset: {folder / 'metadata.jsonl'} line 1 names ../outside.jpg, outside the dataset "
        "folder; give a path relative to the folder holding metadata.jsonl."
    )


def test_a_missing_caption_and_an_empty_one_get_their_own_messages(registered, photos):
    folder = photos(2)
    (folder / "01.txt").unlink()
    assert dataset_error(folder, "missing_caption") == (
        f"EriDiffusion_LoadDataset: {folder / '01.jpg'} has no caption; write 01.txt beside it, {USE_TRIGGER}"
    )
    (folder / "01.txt").write_text(" \n", encoding="utf-8")
    assert dataset_error(folder, "empty_caption") == (
        f"EriDiffusion_LoadDataset: {folder / '01.txt'}, the caption of {folder / '01.jpg'}, is empty; write the "
        f"caption in it, {USE_TRIGGER}"
    )
    outcome = run_training(
        folder, "empty_caption_trigger", dataset_options={"missing_caption": "use trigger word", "trigger_word": "sks"}
    )
    assert outcome.success, outcome.error
    assert load_dataset(str(folder), trigger_word="sks", missing_caption="trigger_word").records[1].caption == "sks"


def test_a_byte_order_mark_is_not_part_of_the_caption(registered, photos):
    folder = photos(1)
    (folder / "00.txt").write_bytes("\ufeffa photo of sks dog".encode("utf-8"))
    assert load_dataset(str(folder)).records[0].caption == "a photo of sks dog"
    with_metadata = photos(1, name="with_metadata")
    (with_metadata / "metadata.jsonl").write_bytes('\ufeff{"file_name": "00.jpg", "text": "sks"}\n'.encode("utf-8"))
    assert load_dataset(str(with_metadata)).records[0].caption == "sks"
    outcome = run_training(folder, "bom_caption")
    assert outcome.success, outcome.error


def test_a_tiny_image_is_named_with_the_options_the_node_has(registered, photos):
    folder = photos(1)
    Image.new("RGB", (8, 8), "white").save(folder / "tiny.png")
    (folder / "tiny.txt").write_text("a white square", encoding="utf-8")
    assert dataset_error(folder, "tiny_image") == (
        f"EriDiffusion_LoadDataset: {folder / 'tiny.png'} is 8x8, smaller than 64 pixels on its short side (the least "
        "EriDiffusion trains on); remove it from the folder or upscale it."
    )


def test_a_rank_wider_than_layers_warns_once_naming_them(registered, photos, comfy_dirs, caplog):
    import safetensors.torch

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        outcome = run_training(
            photos(1),
            "wide_rank",
            trainer={"rank": 64, "alpha": 64.0},
            save={"filename_prefix": "wide_rank", "dtype": "fp32"},
        )
    assert outcome.success, outcome.error
    warnings = [r.getMessage() for r in caplog.records if "is larger than the width" in r.getMessage()]
    assert len(warnings) == 1
    match = re.fullmatch(
        r"EriDiffusion: rank 64 \(conv_rank 0\) is larger than the width of (\d+) adapted layers: "
        r"(.+)\. An adapter of a layer cannot use more rank than its width, so the rest only adds "
        r"parameters to the file; lower the rank to (\d+) or less\.",
        warnings[0],
    )
    assert match, warnings[0]
    tensors = safetensors.torch.load_file(os.path.join(comfy_dirs["loras"], "wide_rank.safetensors"))
    widths = [
        min(tensors[k].shape[0], tensors[k.replace("lora_up", "lora_down")][0].numel())
        for k in tensors
        if k.endswith(".lora_up.weight")
    ]
    assert int(match.group(1)) == sum(w < 64 for w in widths) > 0
    assert int(match.group(3)) == min(widths)


def test_cancel_stops_the_run_within_one_step_keeping_its_checkpoints(registered, photos):
    import comfy.model_management
    import folder_paths

    checkpoints = os.path.join(folder_paths.get_output_directory(), "cancelled", "checkpoints")
    seen = {}

    def cancel_after_step_3():
        deadline = time.monotonic() + 300
        while not os.path.exists(os.path.join(checkpoints, "cancelled_step000003.safetensors")):
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)
        comfy.model_management.interrupt_current_processing(True)  # what ComfyUI's Cancel button does
        seen["at"] = max(int(f[-18:-12]) for f in os.listdir(checkpoints) if f.endswith(".safetensors"))

    watcher = threading.Thread(target=cancel_after_step_3, daemon=True)
    watcher.start()
    try:
        outcome = run_training(photos(1), "cancelled", trainer={"steps": 500, "save_every": 1})
    finally:
        comfy.model_management.interrupt_current_processing(False)
    watcher.join(timeout=10)
    assert not outcome.success
    assert any(kind == "execution_interrupted" for kind, _ in outcome.executor.status_messages)
    steps = sorted(int(f[-18:-12]) for f in outcome.checkpoints() if f.endswith(".safetensors"))
    assert steps == list(range(1, steps[-1] + 1)) and seen["at"] <= steps[-1] <= seen["at"] + 1
