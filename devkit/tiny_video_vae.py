"""A tiny random-init Wan 2.1 video VAE (ComfyUI's own WanVAE, 8x spatial and 4x temporal
compression, 4k+1 frames), for the video tests and tiny video stacks. Import after runtime.start_host()."""

import comfy.ldm.wan.vae
import comfy.sd
import torch

from eridiffusion.tiny_models import init_weights

# comfy.sd.VAE recognises a Wan 2.1 VAE by "decoder.middle.0.residual.0.gamma" and reads its width
# from "decoder.head.0.gamma"; the rest of the layout (dim_mult [1, 2, 4, 4], 2 res blocks,
# temporal downsampling in the last two levels, 16 latent channels) is fixed there, so only the
# width is ours to shrink.
WAN21_LATENT_CHANNELS = 16


def tiny_wan_vae(generator: torch.Generator, dim: int = 8) -> comfy.sd.VAE:
    """ComfyUI's Wan 2.1 VAE at width `dim` (the real one is 96), float32, random init."""
    model = comfy.ldm.wan.vae.WanVAE(
        dim=dim,
        z_dim=WAN21_LATENT_CHANNELS,
        dim_mult=[1, 2, 4, 4],
        num_res_blocks=2,
        attn_scales=[],
        temperal_downsample=[False, True, True],
        dropout=0.0,
    )
    init_weights(model, generator)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".gamma"):  # RMS_norm scales: ones, as built, so activations keep their scale
                p.fill_(1.0)
    return comfy.sd.VAE(sd=model.state_dict(), dtype=torch.float32)
