"""The tiny SD3 stack (SD3.5 Medium's layout): ComfyUI's MMDiT as detection reads it, clip_l + clip_g +
t5xxl, a 16-channel TAESD; see tiny_stack."""

import comfy.ldm.modules.diffusionmodules.mmdit
import torch

from devkit.detected_configs import detected_model_config
from devkit.tiny_stack import TinyFamily
from eridiffusion.tiny_models import CLIP_G, CLIP_L, diffusion_model, taesd_vae, text_encoder

# SD3's text encoder pads the clip_l+clip_g states to 4096 and joins T5's tokens to them
# (sd3_clip.SD3ClipModel.encode_token_weights), so its T5 must be 4096 wide: one narrow layer.
SD3_T5XXL = {"d_model": 4096, "d_ff": 32, "num_heads": 1, "d_kv": 16, "num_layers": 1}
SD3_CONTEXT = 4096

# SD3.5 Medium as model detection reads it: MMDiT is 64 wide per block (x_embedder), here 2 blocks
# (real 24) so 128 wide in 2 heads of 64; rms qk-norm and self-attention in the first x block (the
# keys' presence); pos_embed cropped from a 32x32 patch grid (512 px; real 384x384); the y and
# context embedders read the clip_l + clip_g pooled width and the 4096-wide clip+T5 states.
SD3_DEPTH = 2
SD3_WIDTH = 64 * SD3_DEPTH
SD3_POS_EMBED_MAX = 32
SD3_LAYOUT = {
    "x_embedder.proj.weight": (SD3_WIDTH, 16, 2, 2),
    "final_layer.linear.weight": (16 * 2 * 2, SD3_WIDTH),
    "y_embedder.mlp.0.weight": (SD3_WIDTH, CLIP_L["hidden_size"] + CLIP_G["hidden_size"]),
    "context_embedder.weight": (SD3_WIDTH, SD3_CONTEXT),
    "pos_embed": (1, SD3_POS_EMBED_MAX**2, SD3_WIDTH),
    "joint_blocks.0.context_block.attn.qkv.weight": (3 * SD3_WIDTH, SD3_WIDTH),
    "joint_blocks.0.context_block.attn.ln_q.weight": (64,),
    "joint_blocks.0.x_block.attn2.qkv.weight": (3 * SD3_WIDTH, SD3_WIDTH),
}


def _checkpoint_with(*encoder_keys):
    """A stand-in state dict holding just the keys by which a model config's clip_target() sees
    which text encoders a checkpoint carries (the values only give their dtype)."""
    return {f"text_encoders.{key}": torch.empty(0, dtype=torch.float32) for key in encoder_keys}


def tiny_sd3(seed: int = 0):
    """SD3.5 (Medium layout): ComfyUI's SD3 MMDiT, clip_l + clip_g + t5xxl, a 16-channel TAESD."""
    generator = torch.Generator().manual_seed(seed)
    config = detected_model_config(SD3_LAYOUT, None, "SD3")
    model = diffusion_model(config, generator)
    # pos_embed is a buffer the checkpoint fills with a 2-D sin-cos table; build that table here
    dit = model.model.diffusion_model
    table = comfy.ldm.modules.diffusionmodules.mmdit.get_2d_sincos_pos_embed_torch(
        dit.hidden_size, SD3_POS_EMBED_MAX, SD3_POS_EMBED_MAX
    )
    dit.pos_embed.copy_(table.reshape(dit.pos_embed.shape))
    target = config.clip_target(
        _checkpoint_with(
            "clip_l.transformer.text_model.final_layer_norm.weight",
            "clip_g.transformer.text_model.final_layer_norm.weight",
            "t5xxl.transformer.encoder.final_layer_norm.weight",
        )
    )
    clip = text_encoder(
        target,
        generator,
        {"clip_l_model_config": CLIP_L, "clip_g_model_config": CLIP_G, "t5xxl_model_config": SD3_T5XXL},
    )
    return model, clip, taesd_vae(16, config.latent_format, generator)


FAMILIES = {
    "sd3": TinyFamily(
        tiny_sd3, family="SD3 / SD3.5 (Medium, Large, Large Turbo)", steps=100, learning_rate=3e-3, resolution=128
    ),
}
