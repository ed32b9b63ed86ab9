"""The tiny HunyuanImage 2.1 stack's byT5 glyph encoder reads the quoted text of a prompt and feeds the
DiT's byt5_in mapper, which changes its output."""

import torch

from devkit.tiny_models import build_tiny


def test_hunyuan_image21_glyph_encoder_feeds_the_byt5_mapper(apply_model):
    model, clip, _ = build_tiny("hunyuan_image21", seed=0)
    latent = torch.randn((1, 64, 8, 8), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        quoted = clip.encode_from_tokens_scheduled(clip.tokenize('a sign that says "sks"'))
        plain = clip.encode_from_tokens_scheduled(clip.tokenize("a sign that says sks"))
        inputs, with_glyphs = apply_model(model, quoted, latent)
        _, without = apply_model(model, plain, latent)
    assert quoted[0][1]["conditioning_byt5small"].shape[-1] == 1472
    assert "conditioning_byt5small" not in plain[0][1]
    assert inputs["txt_byt5"].shape[-1] == 1472
    assert (with_glyphs - without).abs().max() > 1e-4
