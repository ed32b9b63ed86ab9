"""Prompts shown pictures: Qwen-Image-Edit's vision-language encoder reads an edit instruction
with its reference images, as ComfyUI's TextEncodeQwenImageEditPlus feeds it."""

import numpy as np
import torch

from .media import mirrored, open_image_rgb


def reads_images(clip):
    """Whether `clip` is Qwen-Image's vision-language encoder, which TextEncodeQwenImageEditPlus
    shows the reference images to."""
    import comfy.text_encoders.qwen_image

    return isinstance(getattr(clip, "tokenizer", None), comfy.text_encoders.qwen_image.QwenImageTokenizer)


def encode_picture_prompt(clip, text, images):
    """Qwen-Image-Edit's conditioning of `text` with up to three IMAGEs (1, H, W, 3) shown to its
    encoder (none: the edit template alone): TextEncodeQwenImageEditPlus without a VAE, so the
    reference latents are added apart, at the size the model is trained or sampled at."""
    from comfy_extras.nodes_qwen import TextEncodeQwenImageEditPlus

    return TextEncodeQwenImageEditPlus.execute(clip, text, None, *images).result[0]


def shown_picture(path, mirror=False):
    """The IMAGE (1, H, W, 3) a picture prompt shows of the reference image at `path` (flipped left to
    right with `mirror`): the whole picture, as TextEncodeQwenImageEditPlus is given it (it scales it for
    the encoder itself)."""
    pixels = np.asarray(mirrored(open_image_rgb(path), mirror), dtype=np.float32) / 255.0
    return torch.from_numpy(pixels)[None]
