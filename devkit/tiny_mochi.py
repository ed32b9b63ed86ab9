"""The tiny Genmo Mochi stack: ComfyUI's AsymmDiTJoint, its T5-XXL encoder and its VideoVAE at small
widths; see tiny_stack."""

import comfy.ldm.genmo.vae.model as mochi_vae
import torch

from devkit.detected_configs import detected_model_config
from devkit.tiny_stack import T5_TINY, TinyFamily
from devkit.tiny_vaes import vae_of_layout
from eridiffusion.tiny_models import diffusion_model, init_weights, text_encoder

# Genmo Mochi (model_detection: "t5_yproj.weight"; every size is hard-coded there): 2 joint blocks
# (real 48), the visual stream and the text stream 32 wide in 2 heads (real 3072 / 1536 in 24), the
# T5 width (real 4096). The joint block asserts its visual MLP is the real 12288 wide, so the MLP
# ratio is 12288 / 32 and the visual feed-forward keeps its real inner width (8192).
MOCHI_WIDTH = 32
MOCHI_SHRINK = {
    "depth": 2,
    "num_heads": 2,
    "hidden_size_x": MOCHI_WIDTH,
    "hidden_size_y": MOCHI_WIDTH,
    "mlp_ratio_x": 12288 / MOCHI_WIDTH,
    "t5_feat_dim": T5_TINY["d_model"],
}
# Mochi's VAE (12 channels, 8x spatial, 6x temporal: 6k+1 frames) is comfy.ldm.genmo's VideoVAE, whose
# constructor fixes its encoder (64 base channels, x1/2/4/6) and decoder (128 base); comfy.sd.VAE
# recognises it by a decoder key at its real shape. The tiny one is the same class with the same
# encoder and decoder classes at 32 base channels (the norms' 32 groups), x1/2/3/4 (each level must
# widen), one res block per level, attention where the real encoder has it.
MOCHI_VAE_LAYOUT = {"decoder.blocks.2.blocks.3.stack.5.weight": (512, 512, 3, 3, 3)}
MOCHI_VAE_LEVELS = {"base_channels": 32, "channel_multipliers": [1, 2, 3, 4], "num_res_blocks": [1] * 5}
MOCHI_FRAMES = 7  # 6k+1: the clip length the Mochi VAE decodes to (9-frame clips train as 7)


def tiny_mochi_vae(generator):
    """ComfyUI's Mochi VideoVAE at 32..128 channels (real: 64..384 encoding, 128..768 decoding)."""
    model = mochi_vae.VideoVAE.__new__(mochi_vae.VideoVAE)
    torch.nn.Module.__init__(model)
    model.encoder = mochi_vae.Encoder(
        in_channels=15,  # RGB plus its Fourier features
        latent_dim=12,
        temporal_reductions=[1, 2, 3],
        spatial_reductions=[2, 2, 2],
        prune_bottlenecks=[False] * 5,
        has_attentions=[False, True, True, True, True],
        input_is_conv_1x1=True,
        padding_mode="replicate",
        **MOCHI_VAE_LEVELS,
    )
    model.decoder = mochi_vae.Decoder(
        latent_dim=12,
        temporal_expansions=[1, 2, 3],
        spatial_expansions=[2, 2, 2],
        has_attention=[False] * 5,
        padding_mode="replicate",
        output_norm=False,
        **MOCHI_VAE_LEVELS,
    )
    init_weights(model, generator)
    return vae_of_layout(MOCHI_VAE_LAYOUT, model)


def tiny_mochi(seed: int = 0):
    """Genmo Mochi: ComfyUI's AsymmDiTJoint, its T5-XXL encoder and its VAE."""
    generator = torch.Generator().manual_seed(seed)
    model_config = detected_model_config({"t5_yproj.weight": (1,)}, MOCHI_SHRINK, "GenmoMochi")
    model = diffusion_model(model_config, generator)
    clip = text_encoder(model_config.clip_target(), generator, {"t5xxl_model_config": T5_TINY})
    return model, clip, tiny_mochi_vae(generator)


FAMILIES = {
    "mochi": TinyFamily(
        tiny_mochi,
        family="Genmo Mochi",
        video_frames=MOCHI_FRAMES,
        needs=("GenmoMochi",),
    ),
}
