"""The tiny HunyuanVideo 1.5 stack's Qwen2.5-VL encoder has a tiny vision tower of the same class in
place of the full-size one ComfyUI builds."""

import torch

from devkit import tiny_hunyuan_video, tiny_stack
from devkit.detected_configs import detected_model_config


def test_qwen_vision_tower_is_replaced_by_a_tiny_one():
    model_config = detected_model_config(
        tiny_hunyuan_video.HUNYUAN_VIDEO15_LAYOUT, tiny_hunyuan_video.HUNYUAN_VIDEO15_SHRINK, "HunyuanVideo15"
    )
    options = {"qwen25_7b_model_config": tiny_stack.LLAMA_TINY_4_LAYERS, "_model_config": tiny_hunyuan_video.BYT5_TINY}
    clip = tiny_hunyuan_video.text_encoder_with_a_tiny_vision_tower(
        model_config.clip_target(), torch.Generator().manual_seed(0), options
    )
    visual = clip.cond_stage_model.qwen25_7b.transformer.visual
    assert visual.hidden_size == 32
    assert sum(p.numel() for p in clip.cond_stage_model.parameters()) < 20_000_000  # real: over 7 billion
