"""Tiny stacks of the UNet classes beside SD1.5 and SDXL: SD 2.x and the SDXL refiner (rows of the
support table), and the instruct-pix2pix UNets, which no row names and which the tests train through
the generic path (eridiffusion.training.model.families.generic_family). Built as eridiffusion.tiny_models
builds SD1.5 and SDXL: ComfyUI's own model classes with the widths cut down. Import once ComfyUI is on
sys.path."""

import comfy.supported_models

from devkit.tiny_stack import TinyFamily
from eridiffusion.tiny_models import (
    CLIP_G,
    CLIP_L,
    SD15_UNET,
    SDXL_UNET,
    TINY_CLIPS,
    tiny_stack,
)

# SD 2.x: SD1.5's UNet layout with linear projections in its transformers, under OpenCLIP ViT-H
# (ComfyUI's clip_h), cut to the tiny clip_l's size. The class reads a file without v-prediction's
# signature as ε-prediction, as here.
CLIP_H = dict(CLIP_L)
SD20_UNET = {**SD15_UNET, "use_linear_in_transformer": True, "context_dim": CLIP_H["hidden_size"]}

# The SDXL refiner: SDXL's layout under clip_g alone, its adm vector clip_g's pooled output and 5
# Timestep(256) embeddings (height, width, crop_h, crop_w, aesthetic score).
SDXL_REFINER_UNET = {
    **SDXL_UNET,
    "context_dim": CLIP_G["hidden_size"],
    "adm_in_channels": CLIP_G["hidden_size"] + 5 * 256,
}

# Instruct-pix2pix: the UNet takes the edited image's latent beside the noisy one (8 input channels);
# trained from captioned images alone, that latent is ComfyUI's own empty value (zeros).
IP2P_SD15_UNET = {**SD15_UNET, "in_channels": 8}
IP2P_SDXL_UNET = {**SDXL_UNET, "in_channels": 8}


def tiny_sd20(seed=0):
    """A random SD 2.x stack: ComfyUI's SD20 UNet, clip_h text encoder and a 4-channel TAESD."""
    clips = {**TINY_CLIPS, "clip_h_model_config": CLIP_H}
    return tiny_stack(comfy.supported_models.SD20(dict(SD20_UNET)), seed, clips=clips)


def tiny_sdxl_refiner(seed=0):
    """A random SDXL refiner stack: ComfyUI's SDXLRefiner UNet, clip_g and a 4-channel TAESD."""
    return tiny_stack(comfy.supported_models.SDXLRefiner(dict(SDXL_REFINER_UNET)), seed)


def tiny_sd15_ip2p(seed=0):
    """A random instruct-pix2pix SD1.5 stack (ComfyUI's SD15_instructpix2pix): no row names it."""
    return tiny_stack(comfy.supported_models.SD15_instructpix2pix(dict(IP2P_SD15_UNET)), seed)


def tiny_sdxl_ip2p(seed=0):
    """A random instruct-pix2pix SDXL stack (ComfyUI's SDXL_instructpix2pix): no row names it."""
    return tiny_stack(comfy.supported_models.SDXL_instructpix2pix(dict(IP2P_SDXL_UNET)), seed)


FAMILIES = {
    "sd20": TinyFamily(tiny_sd20, family="SD 2.x"),
    "sdxl_refiner": TinyFamily(tiny_sdxl_refiner, family="SDXL Refiner", steps=300),
}

# {ComfyUI model class: builder} of classes that no row names, for the generic path's tests.
GENERIC_STACKS = {"SD15_instructpix2pix": tiny_sd15_ip2p, "SDXL_instructpix2pix": tiny_sdxl_ip2p}
