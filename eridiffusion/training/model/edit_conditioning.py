"""An edit model's prompt with its reference images, as the host's nodes feed them: Qwen-Image-Edit
reads the references through its vision-language encoder (TextEncodeQwenImageEditPlus's picture
prompt); every edit model (Flux Kontext, Flux.2, Qwen-Image-Edit) reads their VAE latents as
`reference_latents` (ReferenceLatent's)."""

import node_helpers
import torch

from ..data.picture_prompts import encode_picture_prompt, reads_images


def with_reference_latents(conditioning, latents):
    """`conditioning` with VAE latents (1, C, ...) appended to its reference_latents, as chained
    ReferenceLatent nodes append them."""
    if not latents:
        return conditioning
    return node_helpers.conditioning_set_values(conditioning, {"reference_latents": list(latents)}, append=True)


def encode_with_references(clip, vae, text, images, encode, edit=False):
    """The conditioning of prompt `text` with reference IMAGEs `images` (1, H, W, 3): through the
    encoder where it reads pictures, else `encode(text)`; then the images' latents by `vae`. `edit`:
    through the picture-reading encoder's edit template even without images."""
    if not images and not edit:
        return encode(text)
    conditioning = encode_picture_prompt(clip, text, images) if reads_images(clip) else encode(text)
    with torch.no_grad():
        latents = [vae.encode(image[..., :3]) for image in images]
    return with_reference_latents(conditioning, latents)
