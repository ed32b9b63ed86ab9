"""Tiny random-init image-to-video stacks (Wan 2.1 I2V, Wan 2.2 I2V 14B, HunyuanVideo 1.5 I2V) built
from ComfyUI's own classes as tiny_video builds the text-to-video ones: each diffusion model's config
is what the host's model detection reads from the family's keys at tiny shapes. They train with
CacheLatents' start_image on (TinyFamily.start_image)."""

from devkit.detected_configs import detected_model_config
from devkit.tiny_models import TinyFamily
from devkit.tiny_video import (
    VIDEO_FRAMES,
    WAN_SHRINK,
    _wan_layout,
    _wan_stack,
    tiny_hunyuan_video15,
)
from devkit.tiny_video_vae import tiny_wan_vae

# Wan's image-to-video models take 36 channels in: the 16-channel latent, the 4-channel mask and the
# 16-channel start-image latent that model_base.WAN21.concat_cond lays beside it, 144 values per 2x2
# patch. The tiny ones are 160 wide (2 heads of 80), so the patch embedding can keep the start image
# apart from the noisy latent (32 wide, it mixes them beyond recovery and a LoRA cannot learn to follow it).
WAN_I2V_WIDTH = 160
_WAN_I2V_IN = {"patch_embedding.weight": (WAN_I2V_WIDTH, 36, 1, 2, 2)}
# Wan 2.2 I2V A14B: detected as "t2v" (no CLIP-vision embedding), so ComfyUI loads it as WAN21_T2V.
WAN22_I2V_LAYOUT = {**_wan_layout(16, WAN_I2V_WIDTH), **_WAN_I2V_IN}
# Wan 2.1 I2V: its CLIP-vision projection (img_emb, 1280 wide as detection builds it) makes it "i2v",
# loaded as WAN21_I2V.
WAN21_I2V_LAYOUT = {**WAN22_I2V_LAYOUT, "img_emb.proj.0.bias": (1280,)}


def tiny_wan21_i2v(seed: int = 0):
    """Wan 2.1 image-to-video: ComfyUI's WanModel (i2v), the umt5 encoder and a Wan 2.1 VAE."""
    return _wan_stack(detected_model_config(WAN21_I2V_LAYOUT, WAN_SHRINK, "WAN21_I2V"), tiny_wan_vae, seed)


def tiny_wan22_i2v(seed: int = 0):
    """Wan 2.2 I2V A14B (one expert): ComfyUI's WanModel on 36 channels in, the umt5 encoder and a Wan 2.1 VAE."""
    return _wan_stack(detected_model_config(WAN22_I2V_LAYOUT, WAN_SHRINK, "WAN21_T2V"), tiny_wan_vae, seed)


def _i2v(build, family):
    return TinyFamily(build, family=family, video_frames=VIDEO_FRAMES, start_image=True)


FAMILIES = {
    "wan21_i2v": _i2v(tiny_wan21_i2v, "Wan 2.1 image-to-video"),
    "wan22_i2v_14b": _i2v(tiny_wan22_i2v, "Wan 2.2 image-to-video 14B"),
    "hunyuan_video15_i2v": _i2v(tiny_hunyuan_video15, "HunyuanVideo 1.5 image-to-video"),
}
