"""Full-size architectures for the benchmarks: SDXL's unet_config, and the state-dict layouts of Flux.1 dev,
Wan 2.1/2.2 14B, Qwen-Image, Flux.2 dev and Flux.2 klein 9B (detected as 11.9, 14.3, 20.4, 32.2 and 9.1
billion parameters by ComfyUI 0.28)."""

SDXL_UNET = {
    "use_checkpoint": False,
    "image_size": 32,
    "out_channels": 4,
    "use_spatial_transformer": True,
    "legacy": False,
    "num_classes": "sequential",
    "adm_in_channels": 2816,
    "in_channels": 4,
    "model_channels": 320,
    "num_res_blocks": [2, 2, 2],
    "transformer_depth": [0, 0, 2, 2, 10, 10],
    "channel_mult": [1, 2, 4],
    "transformer_depth_middle": 10,
    "use_linear_in_transformer": True,
    "context_dim": 2048,
    "num_head_channels": 64,
    "transformer_depth_output": [0, 0, 0, 2, 2, 2, 10, 10, 10],
    "use_temporal_attention": False,
    "use_temporal_resblock": False,
}

# Flux.1 dev as a checkpoint's state dict shows it to ComfyUI's model detection (the config comes
# from the running host's detection, so fields a newer ComfyUI adds are filled in by it):
# 3072 wide, 19 double + 38 single blocks, T5-XXL and CLIP-L inputs, guidance embedding.
FLUX_DEV_LAYOUT = {
    "double_blocks.0.img_attn.norm.key_norm.scale": (128,),
    "img_in.weight": (3072, 64),
    "txt_in.weight": (3072, 4096),
    "vector_in.in_layer.weight": (3072, 768),
    "guidance_in.in_layer.weight": (3072, 256),
    **{f"double_blocks.{i}.x": (1,) for i in range(19)},
    **{f"single_blocks.{i}.x": (1,) for i in range(38)},
}

# Wan 2.1 14B text-to-video as its state dict shows it to ComfyUI's model detection: 5120 wide
# (40 heads of 128), a 13824-wide feed-forward, 40 blocks, 16 latent channels in and out, umt5 input.
WAN21_14B_LAYOUT = {
    "head.modulation": (1, 2, 5120),
    "head.head.weight": (16 * 2 * 2, 5120),
    "patch_embedding.weight": (5120, 16, 1, 2, 2),
    "blocks.0.ffn.0.weight": (13824, 5120),
    **{f"blocks.{i}.x": (1,) for i in range(40)},
}

# The 2026 models the memory frontier is measured on (issue 30), as their state dicts show them to
# ComfyUI's model detection.
# Qwen-Image (20B): 3072 wide (24 heads of 128), 60 blocks, 64 packed latent channels in, Qwen2.5-VL
# 7B's 3584-wide text states.
QWEN_IMAGE_LAYOUT = {
    "txt_norm.weight": (3584,),
    "img_in.weight": (3072, 64),
    "txt_in.weight": (3072, 3584),
    **{f"transformer_blocks.{i}.x": (1,) for i in range(60)},
}


def _flux2_layout(hidden, double, single, context):
    """Flux.2 (its global modulation, no biases, 128 latent channels in, 32+32+32+32 RoPE axes: heads
    of 128) `hidden` wide with `double` + `single` blocks and `context`-wide text states."""
    return {
        "double_blocks.0.img_attn.norm.key_norm.scale": (128,),
        "double_stream_modulation_img.lin.weight": (6 * hidden, hidden),
        "img_in.weight": (hidden, 128),
        "txt_in.weight": (hidden, context),
        **{f"double_blocks.{i}.x": (1,) for i in range(double)},
        **{f"single_blocks.{i}.x": (1,) for i in range(single)},
    }


# Flux.2 dev (32B): 6144 wide, 8 double + 48 single blocks, Mistral Small 3.1's 3 x 5120 text states.
FLUX2_DEV_LAYOUT = {**_flux2_layout(6144, 8, 48, 15360), "guidance_in.in_layer.weight": (6144, 256)}
# Flux.2 klein 9B: 4096 wide, 8 double + 24 single blocks, Qwen3-8B's 3 x 4096 text states, no
# guidance embedding (klein is not guidance-distilled).
FLUX2_KLEIN_9B_LAYOUT = _flux2_layout(4096, 8, 24, 12288)
# Wan 2.2 14B (text-to-video, each of its two experts): Wan 2.1 14B's layout.
WAN22_14B_LAYOUT = WAN21_14B_LAYOUT
