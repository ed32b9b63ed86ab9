"""Image-to-video training: a sample's start image (a clip's first frame; a still, itself) made into
the conditioning values the host's own image-to-video node sets on a prompt, concat_latent_image and
concat_mask, by calling that node: WanImageToVideo for the models of the Wan 2.1 VAE (Wan 2.1 I2V,
Wan 2.2 I2V 14B), HunyuanVideo15ImageToVideo for HunyuanVideo 1.5's. The model's own concat_cond
reads them, in training as in sampling."""

import importlib

import torch

from ...errors import EriDiffusionError

START_VALUES = ("concat_latent_image", "concat_mask")  # what the nodes set on the conditioning


def start_image_node(vae):
    """(module, class name) of the host's image-to-video node for the models `vae` (a ComfyUI VAE)
    encodes for; an error naming the VAE's kind when it is no such model's."""
    import comfy.ldm.wan.vae

    if isinstance(vae.first_stage_model, comfy.ldm.wan.vae.WanVAE):
        return "comfy_extras.nodes_wan", "WanImageToVideo"
    if (
        getattr(vae, "latent_dim", 2) == 3
        and vae.latent_channels == 32
        and vae.spacial_compression_encode() == 16
        and (vae.temporal_compression_decode() or 1) == 4
    ):  # HunyuanVideo 1.5's VAE (ComfyUI knows it by its 32 latent channels, 16x16x4 compression)
        return "comfy_extras.nodes_hunyuan", "HunyuanVideo15ImageToVideo"
    raise EriDiffusionError(
        f"start_image: this VAE ({type(vae.first_stage_model).__name__}, {vae.latent_channels} latent channels) is "
        "not the VAE of an image-to-video model EriDiffusion conditions on a start image (Wan 2.1 / Wan 2.2 14B I2V: "
        "the Wan 2.1 VAE; HunyuanVideo 1.5 I2V: its VAE). Connect that model's VAE to CacheLatents and "
        "SampleDuringTraining, or turn start_image off."
    )


# CLIPVisionEncode's crop for the start image: "none", as ComfyUI's Wan image-to-video templates encode
# it (the image is already fitted to the sample's size; a center crop would cut its sides off).
CLIP_VISION_CROP = "none"
VISION_FIELDS = ("last_hidden_state", "penultimate_hidden_states", "image_embeds")  # what the models read


def start_values(vae, start_image, width, height, frames, clip_vision=None):
    """{concat_latent_image, concat_mask} (CPU, float32) of a clip of `frames` frames at `width` x
    `height` that starts with `start_image` ((1, H, W, 3) IMAGE in [0, 1]), as the host's node for
    `vae` builds them; with a CLIP_VISION `clip_vision`, also the start image's clip_vision_output
    (CLIPVisionEncode's), which the node sets too (Wan 2.1 I2V's image features, HunyuanVideo 1.5's SigLIP)."""
    module, name = start_image_node(vae)
    node = getattr(importlib.import_module(module), name)
    empty = [[torch.zeros(1, 1, 1), {}]]
    vision = None
    if clip_vision is not None:
        import nodes  # ComfyUI's

        vision = nodes.CLIPVisionEncode().encode(clip_vision, start_image, CLIP_VISION_CROP)[0]
    values = node.execute(
        empty, empty, vae, width, height, frames, 1, start_image=start_image, clip_vision_output=vision
    ).args[0][0][1]
    out = {key: values[key].to("cpu", torch.float32).contiguous() for key in START_VALUES}
    if vision is not None:
        out["clip_vision_output"] = values["clip_vision_output"]
    return out


def as_tensors(values):
    """Start values as plain tensors for the latent cache (a clip_vision_output's as clip_vision_output.<field>)."""
    tensors = {key: values[key] for key in START_VALUES}
    vision = values.get("clip_vision_output")
    for field in VISION_FIELDS if vision is not None else ():
        tensors[f"clip_vision_output.{field}"] = vision[field].detach().to("cpu", torch.float32, copy=True).contiguous()
    return tensors


def from_tensors(tensors):
    """The start values that as_tensors stored."""
    import comfy.clip_vision

    values = {key: tensors[key] for key in START_VALUES}
    if any(key.startswith("clip_vision_output.") for key in tensors):
        vision = comfy.clip_vision.Output()
        for field in VISION_FIELDS:
            vision[field] = tensors[f"clip_vision_output.{field}"]
        values["clip_vision_output"] = vision
    return values


def with_start_values(conditioning, values):
    """`conditioning` with the start image's `values` set on each of its entries, as the node sets them
    (a copy: the input is not changed)."""
    import node_helpers  # ComfyUI's

    return node_helpers.conditioning_set_values(conditioning, values)
