"""The tiny SD3 stack has SD3.5 Medium's layout (self-attention in the first x block, rms qk-norm), all
three text encoders, and its position table is the sin-cos one a checkpoint fills in."""

import comfy.ldm.modules.diffusionmodules.mmdit
import torch

from devkit import tiny_sd3

PROMPT = "a photo of sks dog"


def test_sd3_has_the_sd35_layout_and_all_three_text_encoders(stack_of):
    model, clip, _ = stack_of("sd3")
    dit = model.model.diffusion_model
    assert [hasattr(b.x_block, "attn2") for b in dit.joint_blocks] == [True, False]  # x_block_self_attn_layers
    assert type(dit.joint_blocks[0].context_block.attn.ln_q).__name__ == "RMSNorm"  # qk_norm "rms"
    te = clip.cond_stage_model
    assert te.clip_l is not None and te.clip_g is not None and te.t5xxl is not None
    cond = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
    # 77 CLIP tokens (l and g side by side, padded to T5's width) followed by 77 T5 tokens
    assert tuple(cond[0][0].shape) == (1, 154, 4096)
    assert tuple(cond[0][1]["pooled_output"].shape) == (1, 96)


def test_sd3_pos_embed_is_the_sincos_table_not_uninitialised_memory(stack_of):
    model, _, _ = stack_of("sd3")
    dit = model.model.diffusion_model
    size = tiny_sd3.SD3_POS_EMBED_MAX
    table = comfy.ldm.modules.diffusionmodules.mmdit.get_2d_sincos_pos_embed_torch(dit.hidden_size, size, size)
    assert tuple(dit.pos_embed.shape) == (1, size * size, dit.hidden_size)
    assert torch.equal(dit.pos_embed[0], table)
