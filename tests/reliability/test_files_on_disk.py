"""Issue 11, cases 4, 8 and 9: SaveLoRA never writes outside models/loras, names every file-system
failure with the fix instead of a raw OS error, writes files with the process umask, and runs and
SaveLoRA sweep the temp files a killed process left behind."""

import os
import shutil
import stat
import subprocess
import time

import pytest
import torch

from devkit.workflow import run_training
from eridiffusion.errors import EriDiffusionError
from eridiffusion.formats.atomic_file import FILE_MODE
from eridiffusion.formats.lora_file import TrainedLoRA
from eridiffusion.nodes.save_node import SaveLoRA


def small_lora():
    return TrainedLoRA(
        {
            "lora_unet_x.lora_up.weight": torch.ones(4, 2),
            "lora_unet_x.lora_down.weight": torch.ones(2, 4),
            "lora_unet_x.alpha": torch.tensor(2.0),
        },
        {"architecture": "SD15"},
    )


def save(prefix, overwrite=False):
    return SaveLoRA.execute(small_lora(), filename_prefix=prefix, dtype="fp16", overwrite=overwrite).result[0]


def refusal(prefix, overwrite=False):
    with pytest.raises(EriDiffusionError) as raised:
        save(prefix, overwrite)
    return str(raised.value)


def test_prefix_dot_is_refused_when_the_prompt_is_queued_and_nothing_leaves_models_loras(
    registered, photos, comfy_dirs
):
    """ComfyUI asks SaveLoRA's validate_inputs before any node runs: nothing is trained for a name
    that cannot be saved."""
    parent = os.path.dirname(comfy_dirs["loras"])
    before = sorted(os.listdir(parent))
    with pytest.raises(RuntimeError) as rejected:
        run_training(photos(1), "dot_prefix", save={"filename_prefix": "."})
    assert (
        "SaveLoRA filename_prefix '.' must be a relative name inside models/loras (like 'my_lora' or "
        "'people/my_lora'), without '.' or '..' parts or a leading '/'."
    ) in str(rejected.value)
    assert sorted(os.listdir(parent)) == before and not os.path.exists(comfy_dirs["loras"] + ".safetensors")
    assert not os.path.exists(os.path.join(comfy_dirs["output"], "dot_prefix"))


@pytest.mark.parametrize("prefix", ["./x", "a/./b", "a/..", "../escape", "/tmp/absolute"])
def test_prefixes_with_dot_parts_or_leaving_the_folder_are_refused(prefix, comfy_dirs):
    assert refusal(prefix) == (
        f"SaveLoRA filename_prefix '{prefix}' must be a relative name inside models/loras "
        "(like 'my_lora' or 'people/my_lora'), without '.' or '..' parts or a leading '/'."
    )


def test_a_prefix_whose_name_fits_the_file_system_saves_and_a_longer_one_is_refused(comfy_dirs):
    fits = "long/" + "n" * 237  # 237 + "_00001.safetensors" = 255 bytes; the temp name stays short
    assert os.path.basename(save(fits)) == "n" * 237 + ".safetensors"
    assert os.path.basename(save(fits)) == "n" * 237 + "_00001.safetensors"
    assert refusal("long/" + "n" * 238) == (
        f"SaveLoRA filename_prefix 'long/{'n' * 238}' is too long for the file "
        "system, which takes names of up to 255 bytes: keep each folder name and "
        "the file name to 237 bytes or less."
    )


def test_a_nul_character_in_the_prefix_is_refused():
    assert refusal("a\x00b") == "SaveLoRA filename_prefix 'a\\x00b' contains a NUL character; remove it."


def test_a_folder_at_the_target_name_is_named_with_the_fix(comfy_dirs):
    target = os.path.join(comfy_dirs["loras"], "taken", "name.safetensors")
    os.makedirs(target)
    assert refusal("taken/name", overwrite=True) == (
        f"cannot write {target}: Is a directory; a folder has that name: remove the folder or choose another name."
    )
    assert os.path.basename(save("taken/name")) == "name_00001.safetensors"  # without overwrite: the next free name


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders; the immutable case covers root")
def test_a_read_only_folder_is_named_with_the_fix(comfy_dirs):
    folder = os.path.join(comfy_dirs["loras"], "read_only")
    os.makedirs(folder)
    os.chmod(folder, 0o555)
    try:
        assert refusal("read_only/x") == (
            f"cannot write {os.path.join(folder, 'x.safetensors')}: Permission denied; "
            "make the folder writable for the user running ComfyUI."
        )
    finally:
        os.chmod(folder, 0o755)


def chattr(flag, path):
    return shutil.which("chattr") and subprocess.run(["chattr", flag, path], capture_output=True).returncode == 0


def test_an_immutable_folder_is_named_with_the_fix(comfy_dirs):
    folder = os.path.join(comfy_dirs["loras"], "immutable")
    os.makedirs(folder)
    if not chattr("+i", folder):
        pytest.skip("chattr +i needs root on a file system that has the flag")
    try:
        assert refusal("immutable/x") == (
            f"cannot write {os.path.join(folder, 'x.safetensors')}: Operation not "
            "permitted; the folder or file is protected (read-only or immutable): make "
            "it writable for the user running ComfyUI."
        )
        assert os.listdir(folder) == []
    finally:
        chattr("-i", folder)


def test_saved_files_follow_the_process_umask(comfy_dirs):
    mask = os.umask(0)
    os.umask(mask)
    path = save("modes/umask")
    assert stat.S_IMODE(os.stat(path).st_mode) == FILE_MODE == 0o666 & ~mask
    if mask == 0o022:
        assert FILE_MODE == 0o644  # readable by the web server's and other users


def plant(folder, name, age_s):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(b"partial")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return name


STALE = ".my_lora.safetensors.abcd1234.eridiffusion.tmp"  # our pattern, from before this process
FRESH = ".my_lora.safetensors.efgh5678.eridiffusion.tmp"  # our pattern, being written now
FOREIGN = ".notes.txt.tmp"  # someone else's


def test_save_lora_sweeps_its_own_stale_temp_files_only(comfy_dirs):
    folder = os.path.join(comfy_dirs["loras"], "swept")
    kept = {plant(folder, FRESH, 0), plant(folder, FOREIGN, 3600)}
    plant(folder, STALE, 3600)
    save("swept/my_lora")
    assert set(os.listdir(folder)) == kept | {"my_lora.safetensors"}


def test_a_run_start_sweeps_stale_temp_files_of_earlier_runs_of_its_name(registered, photos, comfy_dirs):
    earlier = os.path.join(comfy_dirs["output"], "swept_run", "checkpoints")
    kept = {plant(earlier, FRESH, 0), plant(earlier, FOREIGN, 3600)}
    plant(earlier, STALE, 3600)
    plant(os.path.join(comfy_dirs["output"], "swept_run_7"), STALE, 3600)
    plant(os.path.join(comfy_dirs["output"], "swept_run_other"), STALE, 3600)  # another run's name: not ours
    outcome = run_training(photos(1), "swept_run")
    assert set(os.listdir(earlier)) == kept
    assert os.listdir(os.path.join(comfy_dirs["output"], "swept_run_7")) == []
    assert os.listdir(os.path.join(comfy_dirs["output"], "swept_run_other")) == [STALE]
    assert outcome.success, outcome.error  # in swept_run_2: swept_run still holds files
    assert os.path.isfile(os.path.join(comfy_dirs["output"], "swept_run_2", "loss.json"))


def test_checkpoints_wait_for_the_disk_and_the_loss_log_does_not(quality_stack, tmp_path, monkeypatch):
    """Every file is written atomically (a temp file moved into place); checkpoints and their state
    also wait until the data is on the disk before the move. The loss log, rewritten at every
    read-back while the GPU waits for the next step, does not wait."""
    import dataclasses

    from devkit.short_runs import short_run
    from eridiffusion.training.run.trainer import train_lora

    model, _, _, data = quality_stack
    synced = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    with torch.inference_mode(False):
        result = train_lora(
            model, dataclasses.replace(data, validation=None), short_run("off", "durable", save_every=2), str(tmp_path)
        )
    written = os.listdir(tmp_path)
    assert "loss.json" in written and len(result.checkpoints) >= 2
    assert not [name for name in synced if name.startswith(".loss.json.")], synced
    checkpoints = [os.path.basename(path) for path in result.checkpoints]
    assert all(any(name.startswith(f".{c}"[:40]) for name in synced) for c in checkpoints), (checkpoints, synced)
