"""The latent cache: encode a dataset once: latents of images, clips, edit references and audio through the VAE,
captions through its CLIP, kept on disk under keys that change whenever anything that shapes them
changes (file bytes, frame sampling, crop, bucket, caption text, the VAE's and CLIP's weights), so
a second run encodes nothing. Each entry carries a checksum of its tensors: one that cannot be
read, does not match it or holds NaN is encoded again (with a warning), never trained on."""

import hashlib
import json
import logging
import os
from dataclasses import dataclass

import numpy as np
import safetensors
import torch

from ...errors import EriDiffusionError
from ...formats.atomic_file import sweep_stale_temp_files, write_safetensors_atomic
from .audio import audio_latent_frames, waveform_for_vae
from .buckets import bucket_for, crop_to_bucket, fit_to_bucket
from .clip_audio import clip_audio, encoded_audio
from .media import VideoOptions, media_sha256, mirrored, open_image_rgb, read_clip
from .picture_prompts import encode_picture_prompt, reads_images, shown_picture
from .start_image import as_tensors, from_tensors, start_image_node, start_values

CACHE_FORMAT = 1  # bump when the stored content changes meaning


@dataclass
class CacheStats:
    latents_encoded: int = 0
    latents_loaded: int = 0
    texts_encoded: int = 0
    texts_loaded: int = 0
    entries_rejected: int = 0  # unreadable, checksum mismatch or non-finite: encoded again


def _fold(h, obj):
    """Feed a stable digest of nested tensors/values into hash h (tensors by dtype, shape and
    a sample of values: enough to tell two sets of weights apart)."""
    if isinstance(obj, torch.Tensor):
        flat = obj.detach().reshape(-1)
        picks = torch.cat([flat[:256], flat[-256:], flat[:: max(1, flat.numel() // 256)][:256]])
        h.update(f"{obj.dtype}{tuple(obj.shape)}".encode())
        h.update(picks.to("cpu", torch.float32).numpy().tobytes())
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            h.update(str(k).encode())
            _fold(h, obj[k])
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _fold(h, item)
    elif hasattr(obj, "weights"):  # a ComfyUI weight adapter inside patches
        _fold(h, obj.weights)
    else:
        h.update(repr(obj).encode())


def entry_sha256(tensors, metadata):
    """sha256 hex of a cache entry: its metadata and its tensors' names, dtypes, shapes and bytes."""
    h = hashlib.sha256(json.dumps({k: v for k, v in metadata.items() if k != "sha256"}, sort_keys=True).encode())
    for name in sorted(tensors):
        tensor = tensors[name].detach().to("cpu").contiguous()
        h.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        h.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _write_entry(path, tensors, metadata=None):
    metadata = {**(metadata or {}), "sha256": entry_sha256(tensors, metadata or {})}
    write_safetensors_atomic(path, tensors, metadata, overwrite=True)


def _all_finite(tensors):
    return all(bool(torch.isfinite(t).all()) for t in tensors.values() if t.is_floating_point())


def _read_entry(path, source):
    """(tensors, metadata) of the cache entry at `path`, or None, with a warning naming it and
    `source` (what it encodes), when it cannot be read, misses its checksum or holds NaN/inf."""
    try:
        # cloned: safetensors maps the file, and a file changed in place under a mapped tensor
        # crashes the process (SIGBUS)
        with safetensors.safe_open(path, "pt") as f:
            metadata = f.metadata() or {}
            tensors = {k: f.get_tensor(k).clone() for k in f.keys()}
    except Exception as error:  # safetensors raises several types for a damaged file
        problem = f"cannot be read ({error})"
    else:
        if "sha256" not in metadata:
            problem = "has no checksum (an older EriDiffusion wrote it)"
        elif metadata["sha256"] != entry_sha256(tensors, metadata):
            problem = "does not match its checksum (damaged or overwritten)"
        elif not _all_finite(tensors):
            problem = "holds NaN or infinite values"
        else:
            return tensors, metadata
    logging.warning(f"EriDiffusion: cache entry {path} {problem}; encoding {source} again.")
    return None


def vae_identity(vae):
    return module_identity(vae.first_stage_model, b"vae")


def module_identity(module, kind):
    """A digest of `module`'s weights (what a cache key says of a VAE, a CLIP vision model)."""
    h = hashlib.sha256(kind)
    _fold(h, module.state_dict())
    return h.hexdigest()[:32]


def clip_identity(clip):
    h = hashlib.sha256(b"clip")
    _fold(h, clip.cond_stage_model.state_dict())
    _fold(h, {k: [(p[0], p[1], p[2]) for p in v] for k, v in clip.patcher.patches.items()})
    _fold(h, [getattr(clip, "layer_idx", None), getattr(clip, "tokenizer_options", None)])
    return h.hexdigest()[:32]


class LatentCache:
    """Files under `folder`: latents/<key>.safetensors and text/<key>.safetensors. Several processes
    may write one folder at once (entries are written whole under their content key); only one of
    them sweeps the temp files killed processes left (`sweep`), before any of them writes.
    `edit_instructions`: captions are Qwen-Image-Edit's instructions even without references;
    `inpaint`: each image is also encoded masked (masked_latent), for inpainting models."""

    def __init__(self, folder, vae, clip, sweep=True, edit_instructions=False, inpaint=False):
        self.folder, self.edit_instructions, self.inpaint = folder, edit_instructions, inpaint
        self.vae, self.clip = vae, clip
        self.vae_id, self.clip_id = vae_identity(vae), clip_identity(clip)
        self.stats = CacheStats()
        for kind in ("latents", "text") if sweep else ():  # left by a process killed mid-write
            sweep_stale_temp_files(os.path.join(folder, kind))

    def _path(self, kind, *parts):
        key = hashlib.sha256(json.dumps([CACHE_FORMAT, *parts]).encode()).hexdigest()
        return os.path.join(self.folder, kind, f"{key}.safetensors")

    def latent(self, image_path, resolution, bucket=None, mirror=False):
        """(latent (C,h,w), bucket) of one image, encoded or read back; in its aspect-ratio bucket
        at `resolution`, or in `bucket` (width, height) when given (a reference fits its target's);
        `mirror`: the image flipped left to right first."""
        with open(image_path, "rb") as f:
            image_digest = hashlib.sha256(f.read()).hexdigest()
        image = open_image_rgb(image_path)
        bucket = bucket or bucket_for(image.width, image.height, resolution)
        fitted, crop = fit_to_bucket(mirrored(image, mirror), bucket)
        flipped = ["mirror"] if mirror else []  # (unmirrored entries keep the keys they always had)
        path = self._path("latents", image_digest, list(bucket), list(crop), self.vae_id, *flipped)
        return self._encoded(path, lambda: _pixels([fitted]), image_path), bucket

    def masked_latent(self, image_path, bucket, mask, mirror=False):
        """The latent of an image in `bucket` with the region of `mask` (8-bit PIL, fitted to the
        bucket) grayed out, as InpaintModelConditioning encodes it (the mask rounded), encoded or
        read back."""
        with open(image_path, "rb") as f:
            image_digest = hashlib.sha256(f.read()).hexdigest()
        fitted, crop = fit_to_bucket(mirrored(open_image_rgb(image_path), mirror), bucket)
        mask_digest = hashlib.sha256(mask.tobytes()).hexdigest()
        flipped = ["mirror"] if mirror else []
        path = self._path(
            "latents", "inpaint", image_digest, mask_digest, list(bucket), list(crop), self.vae_id, *flipped
        )

        def pixels():
            keep = 1.0 - torch.from_numpy(np.asarray(mask, dtype=np.float32) / 255.0).round()
            return (_pixels([fitted]) - 0.5) * keep[None, ..., None] + 0.5

        return self._encoded(path, pixels, image_path)

    def audio_latent(self, record, audio):
        """(latent (C, t), bucket) of one audio file cut or padded to `audio.seconds` (AudioOptions),
        encoded as VAEEncodeAudio encodes or read back; the bucket is (samples at the VAE's rate, 1):
        audio files of one length batch together."""
        frames = audio_latent_frames(audio.seconds, self.vae)
        path = self._path("latents", "audio", media_sha256(record.path).hex(), frames, self.vae_id)
        latent = self._encoded(path, lambda: waveform_for_vae(record.path, self.vae, audio), record.path)
        return latent, (frames * self.vae.downscale_ratio, 1)

    def clip_latent(self, record, resolution, video, mirror=False):
        """(latent (C,t,h,w), bucket) of one clip (file or frame folder) sampled by `video`
        (VideoOptions), encoded or read back; every frame gets the same resize and center crop
        (and, with `mirror`, the same flip first)."""
        bucket = bucket_for(record.width, record.height, resolution)
        crop = crop_to_bucket((record.width, record.height), bucket)[1]
        path = self._path(
            "latents",
            "clip",
            media_sha256(record.path).hex(),
            video.frames,
            video.fps,
            list(bucket),
            list(crop),
            self.vae_id,
            *(["mirror"] if mirror else []),
        )
        return self._encoded(
            path,
            lambda: _pixels(
                [fit_to_bucket(mirrored(frame, mirror), bucket)[0] for frame in read_clip(record.path, video)]
            ),
            record.path,
        ), bucket

    def start_values(self, record, video, bucket: tuple[int, int], mirror=False, clip_vision=None):
        """The start-image conditioning values (start_image.start_values) of one record in `bucket`:
        its first frame (a still: the image; `mirror`: flipped) opening a clip of the sample's frame
        count, built by the host's image-to-video node (with `clip_vision`, its image features too)
        or read back."""
        frames, fps = (video.frames, video.fps) if record.clip else (1, 0)
        node = start_image_node(self.vae)[1]
        digest = media_sha256(record.path).hex()
        vision = [module_identity(clip_vision.model, b"clip_vision")] if clip_vision is not None else []
        path = self._path("latents", "start", node, digest, frames, fps, list(bucket), self.vae_id, mirror, *vision)

        def encode():
            first = read_clip(record.path, VideoOptions(1, fps))[0] if record.clip else open_image_rgb(record.path)
            image = _pixels([fit_to_bucket(mirrored(first, mirror), bucket)[0]])
            return as_tensors(start_values(self.vae, image, *bucket, frames, clip_vision))

        overflow = f"the VAE encodes the start image of {record.path} to NaN or infinite values: it overflows at its "
        return from_tensors(
            self._cached(path, encode, record.path, overflow + "precision. Start ComfyUI with --fp32-vae.")
        )

    def clip_audio_latent(self, record, video, audio_vae):
        """The (C, t, freq) latent of the audio track of one clip over its sampled frames (clip_audio.py),
        encoded with `audio_vae` or read back."""
        digest = media_sha256(record.path).hex()
        path = self._path("latents", "track", digest, video.frames, video.fps, vae_identity(audio_vae))
        source = f"the audio track of {record.path}"
        return self._cached(
            path,
            lambda: {"latent": encoded_audio(audio_vae, clip_audio(record.path, video))},
            source,
            f"the audio VAE encodes {source} to NaN or infinite values; check its file (LTXVAudioVAELoader).",
        )["latent"]

    def _stored(self, path, source):
        """The verified entry at `path`, or None when there is none or it was rejected."""
        if not os.path.exists(path):
            return None
        entry = _read_entry(path, source)
        if entry is None:
            self.stats.entries_rejected += 1
        return entry

    def _encoded(self, path, vae_input, source):
        """The latent stored at `path`, or the VAE's encoding of `vae_input()` (the pixels of one
        image or of a clip's frames, or a waveform; `source` is their file) written there."""
        return self._cached(
            path,
            lambda: {"latent": self.vae.encode(vae_input())[0].to("cpu", torch.float32).contiguous()},
            source,
            f"the VAE encodes {source} to NaN or infinite values: it overflows at its "
            "precision. Start ComfyUI with --fp32-vae (SDXL: or load the fp16-fix VAE).",
        )["latent"]

    def _cached(self, path, encode, source, overflow):
        """The tensors stored at `path`, or those `encode()` gives ({name: CPU tensor}) written there;
        `overflow` is the error's message when they hold NaN or infinite values."""
        stored = self._stored(path, source)
        if stored is not None:
            self.stats.latents_loaded += 1
            return stored[0]
        tensors = encode()
        if not _all_finite(tensors):
            raise EriDiffusionError(overflow)
        self.stats.latents_encoded += 1
        _write_entry(path, tensors)
        return tensors

    def conditioning(self, text, keywords=None):
        """ComfyUI conditioning of `text`, as CLIPTextEncode makes it (with `keywords`, the tokenizer's
        other inputs: an audio file's lyrics and metadata, as TextEncodeAceStepAudio1.5 passes them),
        encoded or read back."""
        path = self._path("text", text, self.clip_id, *([keywords] if keywords else []))
        return self._text(
            path, text, lambda: self.clip.encode_from_tokens_scheduled(self.clip.tokenize(text, **(keywords or {})))
        )

    def shows_pictures(self, references):
        """Whether a caption with these reference images is encoded shown them (Qwen-Image-Edit's
        encoder; with edit_instructions also without any, in the edit template)."""
        return bool(references or self.edit_instructions) and reads_images(self.clip)

    def caption(self, text, references=(), mirror=False):
        """The conditioning a caption trains with: picture_conditioning where shows_pictures, else
        as CLIPTextEncode makes it."""
        if self.shows_pictures(references):
            return self.picture_conditioning(text, references, mirror)
        return self.conditioning(text)

    def picture_conditioning(self, text, images, mirror=False):
        """Qwen-Image-Edit's conditioning of the instruction `text` shown the reference images at the
        paths `images` (mirrored with `mirror`), as TextEncodeQwenImageEditPlus makes it, encoded or
        read back; keyed by the images' bytes too."""
        digests = [media_sha256(image).hex() for image in images]
        path = self._path("text", "picture", text, digests, *(["mirror"] if mirror else []), self.clip_id)

        def encode():
            return encode_picture_prompt(self.clip, text, [shown_picture(image, mirror) for image in images])

        return self._text(path, text, encode)

    def _text(self, path, text, encode):
        """The conditioning stored at `path`, or `encode()`'s (of the caption `text`) written there."""
        stored = self._stored(path, f"the caption {text!r}")
        if stored is not None:
            self.stats.texts_loaded += 1
            return _conditioning_of(*stored)
        conditioning = encode()
        if not all(_all_finite({"cond": cond}) for cond, _ in conditioning):
            raise EriDiffusionError(
                f"the CLIP encodes the caption {text!r} to NaN or infinite values; load the "
                "text encoder at a wider precision (fp32) or check its weights."
            )
        self.stats.texts_encoded += 1
        _write_conditioning(path, conditioning)
        return conditioning


def _pixels(frames):
    """(frames, h, w, 3) float pixels in [0, 1] of PIL images, as ComfyUI's IMAGE holds them."""
    return torch.from_numpy(np.stack([np.asarray(frame, dtype=np.float32) for frame in frames]) / 255.0)


def _write_conditioning(path, conditioning):
    tensors, extras = {}, []
    for i, (cond, options) in enumerate(conditioning):
        tensors[f"{i}.cond"] = cond.detach().to("cpu").contiguous()
        plain = {}
        for key, value in options.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{i}.extra.{key}"] = value.detach().to("cpu").contiguous()
            else:
                plain[key] = value
        extras.append(plain)
    try:
        metadata = {"extras": json.dumps(extras)}
    except TypeError:
        logging.info("EriDiffusion: conditioning options of this CLIP are not plain values; not cached.")
        return
    _write_entry(path, tensors, metadata)


def _conditioning_of(tensors, metadata):
    extras = json.loads(metadata["extras"])
    conditioning = []
    for i, plain in enumerate(extras):
        options = dict(plain)
        prefix = f"{i}.extra."
        options.update({k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)})
        conditioning.append([tensors[f"{i}.cond"], options])
    return conditioning
