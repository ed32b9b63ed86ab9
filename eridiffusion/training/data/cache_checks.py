"""What CacheLatents refuses before anything is encoded: validation or class images that are training
images, media the VAE cannot encode, and the options a model or CLIP cannot use."""

import os

from ...errors import EriDiffusionError
from .audio import is_audio_vae
from .clip_audio import check_audio_vae
from .media import check_frames_for_vae, file_sha256
from .picture_prompts import reads_images
from .start_image import start_image_node


def check_datasets_apart(dataset, validation_dataset=None, regularization_dataset=None):
    """Refuse validation or class images that are training images: the validation loss would then
    measure memorisation (and pick best.safetensors by it), class images would teach the subject.
    The same folder, or the same files (by their bytes) in another, are an error naming them."""
    training = _files_by_size(dataset.records + dataset.held_out)
    for other, role, fix in (
        (
            validation_dataset,
            "validation",
            "connect a folder of images never trained on, or hold some out with LoadDataset's validation fraction",
        ),
        (regularization_dataset, "regularization (class)", "connect a folder of other images of the class"),
    ):
        if other is None:
            continue
        if os.path.realpath(other.folder) == os.path.realpath(dataset.folder):
            raise EriDiffusionError(f"the {role} dataset is the training folder {dataset.folder}; {fix}.")
        for record in other.records + other.held_out:
            twin = _same_file(record.path, training)
            if twin is not None:
                raise EriDiffusionError(
                    f"{record.path} of the {role} dataset is the training image {twin} (the same bytes); {fix}."
                )


def _files_by_size(records):
    """{bytes: [paths]} of the records' files."""
    sizes: dict[int, list[str]] = {}
    for record in records:
        if os.path.isfile(record.path):
            sizes.setdefault(os.path.getsize(record.path), []).append(record.path)
    return sizes


def _same_file(path, by_size):
    """The file of `by_size` ({bytes: [paths]}) with the bytes of `path`, or None (hashed only where sizes match)."""
    if not os.path.isfile(path):
        return None
    candidates = by_size.get(os.path.getsize(path), [])
    if not candidates:
        return None
    digest = file_sha256(path)
    return next((other for other in candidates if file_sha256(other) == digest), None)


def check_vae_takes_clips(dataset, vae):
    """Refuse clips a VAE cannot encode: an image VAE, or a frame count off the VAE's k*n+1 rule."""
    if not dataset.has_clips:
        return
    if getattr(vae, "latent_dim", 2) != 3:
        raise EriDiffusionError(
            f"{dataset.folder} holds video clips, but this VAE encodes still images; "
            "connect the VAE of a video model (Wan, HunyuanVideo, LTX-Video) to CacheLatents "
            "or remove the clips."
        )
    temporal = vae.temporal_compression_decode() or 1
    check_frames_for_vae(dataset.video.frames, temporal, f"dataset {dataset.folder}")


def check_vae_takes_media(dataset, vae):
    """Refuse a dataset the VAE cannot encode: audio files for an image or video VAE, images or clips
    for an audio VAE (checked before anything is encoded)."""
    if dataset.has_audio and not is_audio_vae(vae):
        raise EriDiffusionError(
            f"{dataset.folder} holds audio files, but this VAE encodes images: audio trains an audio model "
            "(ACE-Step 1.5); connect that model's audio VAE to CacheLatents, or give LoadDataset a folder of images."
        )
    if not dataset.has_audio and is_audio_vae(vae):
        raise EriDiffusionError(
            f"this VAE encodes audio (an audio model's, such as ACE-Step 1.5's), but {dataset.folder} holds images "
            "or clips; give LoadDataset a folder of audio files (flac, wav, mp3, ogg) with their captions."
        )
    check_vae_takes_clips(dataset, vae)


def check_inputs(dataset, vae, clip, others, extra_resolutions, edit_instructions, media):
    """Everything wrong with build_training_data's inputs that shows before anything is encoded: media
    the VAEs cannot encode (a start image for the VAE of no image-to-video model, sound for no
    audio-video model's audio VAE or from clips without it) among them."""
    check_datasets_apart(dataset, *others)
    for source in (dataset, *others):
        if source is not None:
            check_vae_takes_media(source, vae)
            if media["audio_vae"] is not None:
                check_audio_vae(media["audio_vae"], source)
    if media["start_image"]:
        start_image_node(vae)
    elif media["clip_vision"] is not None:
        raise EriDiffusionError(
            "CacheLatents' clip_vision encodes the start image of image-to-video training: turn start_image on, "
            "or leave clip_vision unconnected."
        )
    if edit_instructions and not reads_images(clip):
        raise EriDiffusionError(
            "CacheLatents: edit_instructions encodes captions as Qwen-Image-Edit's instructions, but this CLIP is "
            "not Qwen-Image's vision-language encoder; turn edit_instructions off."
        )
    if extra_resolutions and dataset.has_audio:
        raise EriDiffusionError(
            f"{dataset.folder} holds audio files, which have no pixel size: clear CacheLatents' extra_resolutions."
        )
