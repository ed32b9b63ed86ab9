"""The tiny PixArt stacks (alpha and sigma): ComfyUI's PixArtMS, the T5-XXL encoder and a 4-channel
TAESD; see tiny_stack."""

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_stack import T5_TINY, TinyFamily, taesd_stack

# PixArt (model_detection: "t_block.1.weight"): as detected, 2 blocks (real 28), the 512px layout
# (input_size 64, pe_interpolation 1) from a checkpoint's 32x32-patch pos_embed (the model computes
# its own table), the real caption lengths from y_embedding, 120 tokens for alpha and 300 for sigma,
# and alpha's size and aspect micro-conditions from ar_embedder. Detection hard-codes the width:
# cut to 48 (real 1152; a multiple of 3 because the micro-conditions are three hidden/3 embeddings)
# in two heads (real 16); caption_channels (not read) is the tiny T5 width.
PIXART_WIDTH = 48
_PIXART_LAYOUT = {
    "t_block.1.weight": (6 * PIXART_WIDTH, PIXART_WIDTH),
    "pos_embed": (1, 32 * 32, PIXART_WIDTH),
    **blocks("blocks", 2),
}
PIXART_ALPHA_LAYOUT = {
    **_PIXART_LAYOUT,
    "y_embedder.y_embedding": (120, T5_TINY["d_model"]),
    "ar_embedder.mlp.0.weight": (PIXART_WIDTH // 3, 256),
}
PIXART_SIGMA_LAYOUT = {**_PIXART_LAYOUT, "y_embedder.y_embedding": (300, T5_TINY["d_model"])}
PIXART_SHRINK = {"hidden_size": PIXART_WIDTH, "num_heads": 2, "caption_channels": T5_TINY["d_model"]}
# ComfyUI's PixArtMS builds its sin-cos position table with base_size = round(mean latent side / 64)
# * 64 // patch_size, which is 0 (ZeroDivisionError) for images under ~264 px a side on average,
# whatever the config: the tiny PixArts train at 320 px and render 288x256 test samples.
PIXART_SAMPLE_SIZE = (288, 256)


def tiny_pixart_alpha(seed: int = 0):
    """PixArt-alpha: ComfyUI's PixArtMS (with size and aspect micro-conditions), the T5-XXL encoder
    and a 4-channel TAESD (the real VAE is SD1.5's)."""
    model_config = detected_model_config(PIXART_ALPHA_LAYOUT, PIXART_SHRINK, "PixArtAlpha")
    return taesd_stack(model_config, model_config.clip_target(), {"t5xxl_model_config": T5_TINY}, 4, seed)


def tiny_pixart_sigma(seed: int = 0):
    """PixArt-sigma: ComfyUI's PixArtMS, the T5-XXL encoder and a 4-channel TAESD (the real VAE is
    SDXL's)."""
    model_config = detected_model_config(PIXART_SIGMA_LAYOUT, PIXART_SHRINK, "PixArtSigma")
    return taesd_stack(model_config, model_config.clip_target(), {"t5xxl_model_config": T5_TINY}, 4, seed)


FAMILIES = {
    "pixart_alpha": TinyFamily(
        tiny_pixart_alpha, family="PixArt-α / Σ", resolution=320, sample_size=PIXART_SAMPLE_SIZE
    ),
    "pixart_sigma": TinyFamily(
        tiny_pixart_sigma, family="PixArt-α / Σ", resolution=320, sample_size=PIXART_SAMPLE_SIZE
    ),
}
