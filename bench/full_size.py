"""Full-size architecture configs (ComfyUI's own unet_config for each model) for the benchmarks."""

SDXL_UNET = {"use_checkpoint": False, "image_size": 32, "out_channels": 4, "use_spatial_transformer": True,
             "legacy": False, "num_classes": "sequential", "adm_in_channels": 2816, "in_channels": 4,
             "model_channels": 320, "num_res_blocks": [2, 2, 2], "transformer_depth": [0, 0, 2, 2, 10, 10],
             "channel_mult": [1, 2, 4], "transformer_depth_middle": 10, "use_linear_in_transformer": True,
             "context_dim": 2048, "num_head_channels": 64, "transformer_depth_output": [0, 0, 0, 2, 2, 2, 10, 10, 10],
             "use_temporal_attention": False, "use_temporal_resblock": False}

FLUX_DEV = {"image_model": "flux", "in_channels": 16, "out_channels": 16, "vec_in_dim": 768, "context_in_dim": 4096,
            "hidden_size": 3072, "mlp_ratio": 4.0, "num_heads": 24, "depth": 19, "depth_single_blocks": 38,
            "axes_dim": [16, 56, 56], "theta": 10000, "qkv_bias": True, "guidance_embed": True, "patch_size": 2}
