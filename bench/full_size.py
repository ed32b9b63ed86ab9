"""Full-size architectures for the benchmarks: SDXL's unet_config, and Flux.1 dev's state-dict layout."""

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
