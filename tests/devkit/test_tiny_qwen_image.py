"""The tiny Qwen-Image stack's Qwen2.5-VL encoder keeps ComfyUI's full-size vision tower as zeros in
one element each, beside a random language model."""

from devkit.tiny_models import build_tiny


def test_qwen_vl_vision_tower_is_zeros_in_one_element_and_the_language_model_random():
    _, clip, _ = build_tiny("qwen_image", seed=0)
    transformer = clip.cond_stage_model.qwen25_7b.transformer
    vision = list(transformer.visual.parameters())
    assert sum(p.numel() for p in vision) > 600_000_000  # ComfyUI's full-size tower, as the real file has
    assert sum(p.untyped_storage().nbytes() for p in vision) == 4 * len(vision)  # one float each
    assert all(p.count_nonzero() == 0 for p in vision[:3])
    assert float(transformer.model.embed_tokens.weight.std()) > 0.1
