"""A model file checked before ComfyUI's loaders open it (a folder, a missing file, a .safetensors file
that is none, a GGUF file), and what those loaders raise for a file they cannot open, each as an error
naming the file and the fix."""

import contextlib
import json
import os
import pickle

from ..errors import EriDiffusionError, first_line

SAFETENSORS_SUFFIXES = (".safetensors", ".sft")
# Pickle checkpoints: ComfyUI opens them with torch's weights_only loader, which refuses any that
# carries code; their errors are named here.
PICKLE_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin", ".pkl")
MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit on the JSON header
GGUF_MAGIC = b"GGUF"  # the first bytes of a GGUF file (llama.cpp's format, which city96's ComfyUI-GGUF reads)


def existing(path, key):
    """`path` when it is a model file ComfyUI can try to load; an error naming it and the fix when it
    is a folder, missing, or a .safetensors file that is not one (text, truncated, a damaged header)."""
    if os.path.isdir(path):
        raise EriDiffusionError(f"model.{key} {path} is a folder; give the path of the .safetensors file in it.")
    if not os.path.isfile(path):
        raise EriDiffusionError(f"model.{key} {path} does not exist; give the path of the .safetensors file.")
    if _is_gguf(path):
        raise EriDiffusionError(
            f"model.{key} {path} is a GGUF file: ComfyUI's own loaders (which training loads the model with) "
            "read .safetensors files, not GGUF, and a GGUF model's quantized layers (the ComfyUI-GGUF node's) "
            "take no trained adapters here. Give the model's .safetensors release: bf16, or its fp8 / "
            "fp8_scaled file (adapters train on those layers)."
        )
    if path.lower().endswith(SAFETENSORS_SUFFIXES):
        problem = _safetensors_problem(path)
        if problem:
            raise EriDiffusionError(
                f"model.{key} {path} is not a .safetensors file ComfyUI can read: {problem}. Download it again "
                "(or give the right file)."
            )
    return path


def _is_gguf(path):
    """Whether the file at `path` is a GGUF file (its magic, whatever its name)."""
    with open(path, "rb") as f:
        return path.lower().endswith(".gguf") or f.read(4) == GGUF_MAGIC


def _safetensors_problem(path):
    """What is wrong with the safetensors layout of the file at `path` (an 8-byte header length, then
    a JSON header of that length), or None: checked before ComfyUI maps the file."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"it holds {size} bytes"
        length = int.from_bytes(head, "little")
        if length > MAX_HEADER_BYTES or 8 + length > size:
            text = head.isascii() and head.decode("ascii").isprintable()
            return "it is a text file" if text else f"it is truncated or damaged (its header claims {length} bytes)"
        header = f.read(length)
    try:
        json.loads(header)
    except (ValueError, RecursionError):
        return "its header is not the JSON a .safetensors file starts with"
    return None


@contextlib.contextmanager
def loading(path, key):
    """What ComfyUI's loader raises for a file it cannot open, as an error naming the file and the fix."""
    try:
        yield
    except pickle.UnpicklingError as error:
        raise EriDiffusionError(
            f"model.{key} {path} is a pickle checkpoint that ComfyUI will not open safely ({first_line(error)}): a "
            "pickle can run code. Use the model's .safetensors release, or convert the file to .safetensors."
        ) from None
    except (EOFError, OSError) as error:
        raise EriDiffusionError(
            f"model.{key} {path} cannot be read ({first_line(error)}); it is truncated or damaged: download it again."
        ) from None
    except (RuntimeError, KeyError, ValueError) as error:  # ComfyUI's detection (and torch's zip reader)
        if isinstance(error, EriDiffusionError):
            raise
        raise _undetected(error, path, key) from None


def _undetected(error, path, key):
    """ComfyUI's "could not detect model type" as our error, naming the file and what to try."""
    kind = {
        "checkpoint": "a checkpoint",
        "diffusion_model": "a diffusion model",
        "low_noise_model": "a diffusion model",
        "audio_vae": "an audio VAE",
        "clip_vision": "an image encoder (CLIP vision)",
        "text_encoders": "text encoders",
        "vae": "a VAE",
    }[key]
    return EriDiffusionError(
        f"ComfyUI could not load model.{key} {path} ({first_line(error)}); check that it is {kind} of "
        "a model family this ComfyUI version knows."
    )
