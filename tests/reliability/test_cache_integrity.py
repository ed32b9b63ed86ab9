"""Issue 11, case 5: a latent-cache entry that is truncated, empty, overwritten, unchecked or holds
NaN is encoded again with a warning naming it, and the run trains; nothing damaged is trained on."""

import logging
import os

import pytest
import safetensors.torch
import torch

from devkit.workflow import run_training

pytestmark = pytest.mark.one_host("the latent cache's files")


def damage(path, how):
    from eridiffusion.training.data.latent_cache import _write_entry

    data = open(path, "rb").read()
    if how == "empty":
        data = b""
    elif how == "truncated":
        data = data[: len(data) // 2]
    elif how == "overwritten":  # the header still parses; the tensor bytes changed
        data = data[:-16] + bytes(255 - b for b in data[-16:])
    elif how == "nan":
        _write_entry(path, {"latent": torch.full(safetensors.torch.load_file(path)["latent"].shape, float("nan"))})
        return
    elif how == "unchecked":  # as EriDiffusion wrote entries before they carried checksums
        tensors = {k: v.clone() for k, v in safetensors.torch.load_file(path).items()}
        safetensors.torch.save_file(tensors, path)
        return
    with open(path, "wb") as f:
        f.write(data)


PROBLEMS = {
    "overwritten": "does not match its checksum (damaged or overwritten)",
    "nan": "holds NaN or infinite values",
    "unchecked": "has no checksum (an older EriDiffusion wrote it)",
}


@pytest.mark.parametrize("how", ["empty", "truncated", "overwritten", "nan", "unchecked"])
def test_a_damaged_cache_entry_is_encoded_again_with_a_warning_and_the_run_trains(
    how, registered, photos, tmp_path, caplog
):
    dataset, cache = photos(1), tmp_path / "cache"
    first = run_training(dataset, f"cache_{how}_first", cache_folder=cache)
    assert first.success, first.error
    (entry,) = [os.path.join(cache, "latents", name) for name in os.listdir(cache / "latents")]
    clean = safetensors.torch.load_file(entry)["latent"].clone()  # (load_file maps the file damage() changes)
    damage(entry, how)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        second = run_training(dataset, f"cache_{how}_second", cache_folder=cache)
    assert second.success, second.error
    warnings = [r.getMessage() for r in caplog.records if "cache entry" in r.getMessage()]
    image = os.path.join(dataset, "00.jpg")
    if how in PROBLEMS:
        assert warnings == [f"EriDiffusion: cache entry {entry} {PROBLEMS[how]}; encoding {image} again."]
    else:
        assert len(warnings) == 1 and warnings[0].startswith(f"EriDiffusion: cache entry {entry} cannot be read (")
        assert warnings[0].endswith(f"); encoding {image} again.")
    assert torch.equal(safetensors.torch.load_file(entry)["latent"], clean)  # written again, whole
    assert second.losses() == pytest.approx(first.losses(), abs=1e-6)  # trained on the same latent


def test_a_damaged_caption_entry_is_encoded_again(registered, photos, tmp_path, caplog):
    dataset, cache = photos(1), tmp_path / "cache"
    assert run_training(dataset, "caption_cache_first", cache_folder=cache).success
    entries = sorted(os.path.join(cache, "text", name) for name in os.listdir(cache / "text"))
    for entry in entries:  # the caption's and the empty prompt's
        damage(entry, "overwritten")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        second = run_training(dataset, "caption_cache_second", cache_folder=cache)
    assert second.success, second.error
    caption = open(os.path.join(dataset, "00.txt"), encoding="utf-8").read().strip()
    warnings = sorted(r.getMessage() for r in caplog.records if "cache entry" in r.getMessage())
    problem = "does not match its checksum (damaged or overwritten)"
    assert len(warnings) == 2
    assert {w.split("; encoding ")[1] for w in warnings} == {f"the caption {caption!r} again.", "the caption '' again."}
    assert all(w.startswith("EriDiffusion: cache entry ") and problem in w for w in warnings)
