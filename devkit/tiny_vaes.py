"""The VAEs several tiny families share: ComfyUI's Wan 2.1 VAE at a small width (the Wan video
models', Qwen-Image's and its derivatives'), the real TAEF2 (FLUX.2's latent space, also ERNIE-Image's,
Ideogram 4's and Lens's), ComfyUI's pixel-space VAE, and the wrapper that gives a small instance of
a VAE class whose widths comfy.sd.VAE fixes everything comfy.sd.VAE sets for the full-size one.
Import once ComfyUI is on sys.path."""

import logging
import os

import comfy.latent_formats
import comfy.ldm.wan.vae
import comfy.model_management as mm
import comfy.model_patcher
import comfy.sd
import torch

from devkit.paths import taef2_weights
from eridiffusion.errors import EriDiffusionError
from eridiffusion.tiny_models import init_weights

# comfy.sd.VAE recognises a Wan 2.1 VAE by "decoder.middle.0.residual.0.gamma" and reads its width
# from "decoder.head.0.gamma"; the rest of the layout (16 latent channels and these levels, which the
# Wan 2.2 VAE shares: 2 res blocks each, temporal downsampling in the last two) is fixed there, so
# only the width is ours to shrink.
WAN21_LATENT_CHANNELS = 16
WAN_VAE_LEVELS = {
    "dim_mult": [1, 2, 4, 4],
    "num_res_blocks": 2,
    "attn_scales": [],
    "temperal_downsample": [False, True, True],
    "dropout": 0.0,
}


def gammas_to_one(model):
    """RMS_norm scales as built (ones), so activations keep their scale through a random VAE."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("gamma"):
                p.fill_(1.0)


def tiny_wan21_vae(generator: torch.Generator, dim: int = 8) -> comfy.sd.VAE:
    """ComfyUI's Wan 2.1 VAE (causal 3D, 8x spatial and 4x temporal compression, 4k+1 frames; one
    frame per image for Qwen-Image) at width `dim` (the real one is 96), float32, random init."""
    model = comfy.ldm.wan.vae.WanVAE(dim=dim, z_dim=WAN21_LATENT_CHANNELS, **WAN_VAE_LEVELS)
    init_weights(model, generator)
    gammas_to_one(model)
    return comfy.sd.VAE(sd=model.state_dict(), dtype=torch.float32)


def taef2_vae():
    """The real TAEF2 (FLUX.2 latent space), as ComfyUI's VAE loads it."""
    sd = {}
    for part in ("encoder", "decoder"):
        path = os.path.join(taef2_weights(), f"taef2_{part}.pth")
        if not os.path.exists(path):
            raise EriDiffusionError(f"{path} is missing: the flux2 tiny stack needs the TAEF2 weights there.")
        sd.update({f"taesd_{part}.{k}": v for k, v in torch.load(path, weights_only=True).items()})
    return comfy.sd.VAE(sd=sd)


def taef2_patching(vae):
    """The channels and patch of a FLUX.2-latent model ({in_channels, out_channels, patch_size}) over
    TAEF2 `vae`'s latents. ComfyUI 0.3.75's TAESD gives TAEF2's 32 channels at 8x; the FLUX.2 VAE
    (and newer ComfyUI's TAESD) packs each 2x2 patch into 128 channels at 16x. The model patchifies
    what it gets: patch 2 over 32 channels is patch 1 over the packed 128, with the same weights and
    keys."""
    channels = vae.latent_channels
    patch = 2 if channels * 4 == comfy.latent_formats.Flux2.latent_channels else 1
    return {"in_channels": channels, "out_channels": channels, "patch_size": patch}


def pixel_space_vae():
    """ComfyUI's pixel-space VAE, as nodes.VAELoader builds it for "pixel_space": comfy.sd.VAE of a
    state dict holding only "pixel_space_vae", which maps images in [0, 1] to 3-channel latents in
    [-1, 1] at 1x."""
    return comfy.sd.VAE(sd={"pixel_space_vae": torch.tensor(1.0)})


def vae_of_layout(layout_keys, model):
    """comfy.sd.VAE running `model` (a ComfyUI VAE class at small widths) with everything else
    comfy.sd.VAE sets for the full-size VAE it recognises by `layout_keys` ({key: full-size shape}):
    latent channels, spatial and temporal ratios, frame-count formulas, pixel scaling. comfy.sd.VAE
    fixes these VAEs' widths, so the full-size one is built on the meta device (no memory, no
    weights) and replaced by `model`."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # "Missing VAE keys": the meta placeholder has only the layout keys
    try:
        with torch.device("meta"):
            vae = comfy.sd.VAE(sd={k: torch.empty(shape) for k, shape in layout_keys.items()}, dtype=torch.float32)
    finally:
        logging.disable(previous)
    vae.first_stage_model = model.to(torch.float32).eval()
    vae.patcher = comfy.model_patcher.ModelPatcher(
        model, load_device=vae.device, offload_device=mm.vae_offload_device()
    )
    vae.size = None
    vae.model_size()
    return vae
