"""File writes that never leave a half-written file: write a temp file beside the target, then
rename. Temp files share one pattern, so the ones a killed process left behind can be swept later."""

import errno
import json
import math
import os
import re
import struct
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, BinaryIO

from ..errors import EriDiffusionError

if TYPE_CHECKING:
    import torch

TEMP_SUFFIX = ".eridiffusion.tmp"
# `.<start of the target's name>.<mkstemp's 8 random characters>.eridiffusion.tmp`
_TEMP_NAME = re.compile(r"^\..*\.[A-Za-z0-9_]{8}" + re.escape(TEMP_SUFFIX) + "$")
# Characters of the target's name kept in its temp name: the temp name stays shorter than the
# file-system limit whenever the final name fits.
_NAME_KEPT = 40
# A temp file last written before this process started is not one this process is writing.
PROCESS_START = time.time()


def _process_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# mkstemp makes 0600 files; a saved LoRA must be readable as the user's umask says (a shared
# ComfyUI, its web server under another user).
FILE_MODE = 0o666 & ~_process_umask()

# keyed by OSError.errno, which is None for an OSError raised without one
_FIXES: dict[int | None, str] = {
    errno.EACCES: "make the folder writable for the user running ComfyUI",
    errno.EPERM: "the folder or file is protected (read-only or immutable): make it writable for the user "
    "running ComfyUI",
    errno.EROFS: "the file system is mounted read-only: choose a folder on a writable disk",
    errno.ENOSPC: "the disk is full: free some space",
    errno.EDQUOT: "the disk quota is used up: free some space",
    errno.EISDIR: "a folder has that name: remove the folder or choose another name",
    errno.ENOTDIR: "a file stands where a folder of the path should be: remove it or choose another name",
    errno.ENAMETOOLONG: "the name is too long for the file system: choose a shorter one",
}


def write_error(path: str, error: OSError | ValueError, what: str = "") -> EriDiffusionError:
    """An EriDiffusionError naming `path` (`what` it is, if given), what the operating system said
    and the fix."""
    if isinstance(error, ValueError):  # Python refuses a NUL character in a path before the OS sees it
        return EriDiffusionError(f"cannot write {path!r}: the name contains a NUL character; remove it.")
    fix = _FIXES.get(error.errno, "check the folder exists and is writable")
    named = f"{what} {path} cannot be written" if what else f"cannot write {path}"
    return EriDiffusionError(f"{named}: {error.strerror or error}; {fix}.")


def writable_folder(path: str, what: str) -> str:
    """`path`, made if missing, once a file can be written in it; else an EriDiffusionError naming it
    (`what`: "output folder", ...) and the fix: a file in its place, no permission, a read-only disk."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise EriDiffusionError(f"{what} {path} is a file, not a folder; choose a folder (or remove the file).")
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".eridiffusion-probe.", suffix=TEMP_SUFFIX, dir=path)
        os.close(fd)
        os.remove(probe)
    except (OSError, ValueError) as error:
        raise write_error(path, error, what) from None
    return path


def write_atomic(path: str, write: Callable[[str], object], overwrite: bool = False, durable: bool = True) -> str:
    """Call write(temp_path) and move the result to `path` in one step. Without `overwrite`,
    an existing `path` is an error and stays untouched (checked atomically with a hard link).
    `durable`: the data reaches the disk before the move (fsync); a file rewritten every few steps
    (the loss log) skips that wait, which the GPU would otherwise sit out idle. Operating-system
    failures are raised as EriDiffusionError naming the file and the fix."""
    try:
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)[:_NAME_KEPT]}.", suffix=TEMP_SUFFIX, dir=folder)
        os.close(fd)
    except (OSError, ValueError) as error:
        raise write_error(path, error) from None
    try:
        write(tmp)
        os.chmod(tmp, FILE_MODE)
        if durable:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise EriDiffusionError(f"{path} already exists; choose another name or allow overwriting.") from None
    except OSError as error:
        raise write_error(path, error) from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def sweep_stale_temp_files(folder: str) -> list[str]:
    """Remove the temp files of write_atomic in `folder` (not below) that were last written before
    this process started: a process killed mid-write leaves them. Returns the paths removed."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for entry in entries:
        if not _TEMP_NAME.match(entry.name) or not entry.is_file(follow_symlinks=False):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_mtime < PROCESS_START:
                os.remove(entry.path)
                removed.append(entry.path)
        except FileNotFoundError:  # another process swept it first
            continue
    return removed


def write_safetensors_atomic(
    path: str, tensors: dict[str, "torch.Tensor"], metadata: dict[str, str] | None = None, overwrite: bool = False
) -> str:
    """A .safetensors file through write_atomic, written a tensor at a time (write_safetensors): no copy of
    the whole file in memory (safetensors.torch.save's bytes are the file's size: 48 GB for Flux.1-dev's
    weights in fp32), and no temp file of safetensors' own (its save_file writes through `.tmpXXXXXX`,
    which a killed process would leave behind where no sweep looks)."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            write_safetensors(f, tensors, metadata)

    return write_atomic(path, write, overwrite=overwrite)


def write_safetensors(f: BinaryIO, tensors: dict[str, "torch.Tensor"], metadata: dict[str, str] | None) -> None:
    """`tensors` (and `metadata`) into the open file `f` in the safetensors format, the bytes
    safetensors.torch.save makes (its layout: the header, then the tensors by element size, largest first,
    then name), each tensor's bytes written from the tensor itself (a GPU tensor is copied to the CPU
    alone). A dtype the format names no other way goes through safetensors' own serializer."""
    import safetensors.torch
    import torch

    names = _safetensors_dtypes()
    if any(t.dtype not in names for t in tensors.values()):
        f.write(safetensors.torch.save(tensors, metadata=metadata))
        return
    order = sorted(tensors, key=lambda k: (-tensors[k].element_size(), k))
    header: dict[str, Any] = {"__metadata__": metadata} if metadata is not None else {}
    offset = 0
    for key in order:
        tensor = tensors[key]
        end = offset + tensor.numel() * tensor.element_size()
        header[key] = {"dtype": names[tensor.dtype], "shape": list(tensor.shape), "data_offsets": [offset, end]}
        offset = end
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)  # (the data starts 8-aligned, as safetensors pads it)
    f.write(struct.pack("<Q", len(text)) + text)
    for key in order:
        tensor = tensors[key].detach().to("cpu").contiguous().reshape(-1)
        f.write(memoryview(tensor.view(torch.uint8).numpy()))


def _safetensors_dtypes() -> dict[Any, str]:
    """torch dtype -> its name in a safetensors header."""
    import torch

    return {
        torch.float64: "F64",
        torch.float32: "F32",
        torch.float16: "F16",
        torch.bfloat16: "BF16",
        torch.int64: "I64",
        torch.int32: "I32",
        torch.int16: "I16",
        torch.int8: "I8",
        torch.uint8: "U8",
        torch.bool: "BOOL",
        torch.float8_e4m3fn: "F8_E4M3",
        torch.float8_e5m2: "F8_E5M2",
    }


def json_safe(value: Any) -> Any:
    """`value` with every non-finite float as None: JSON has no NaN or Infinity, and a browser's
    JSON.parse rejects the tokens Python writes for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_json_atomic(path: str, value: Any, durable: bool = True) -> str:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(json_safe(value), f, indent=1, allow_nan=False)

    return write_atomic(path, write, overwrite=True, durable=durable)
