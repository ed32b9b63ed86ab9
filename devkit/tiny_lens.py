"""The tiny Lens stack: ComfyUI's LensTransformer2DModel, its GPT-OSS-20B multi-layer encoder shrunk,
and the real TAEF2, as Lens's latent space is FLUX.2's; see tiny_stack."""

import os

import comfy.sd
import torch

from devkit.detected_configs import blocks, detected_model_config
from devkit.tiny_stack import LLAMA_TOKENIZER_DIR, TinyFamily
from devkit.tiny_vaes import taef2_vae
from eridiffusion.tiny_models import diffusion_model, init_weights

# Lens (model_detection: "transformer_blocks.0.attn.norm_added_q.weight" with SwiGLU "img_mlp.w1"):
# detection reads the channels from img_in and proj_out, the heads from img_in's width over the
# 64-wide heads, the layers, and the text width and the number of tapped encoder layers from the
# txt_norm list (4: GPT-OSS layers 5, 11, 17, 23). Tiny: 2 blocks (real 48), 64 wide in two heads of
# 32 with the real rope split halved (4:14:14 for 8:28:28), reading the 4 taps of a 32-wide encoder.
# Lens works on the FLUX.2 VAE's packed latents one token per latent pixel, with no patching of its
# own; ComfyUI's TAESD gives TAEF2's unpacked 32 channels at 8x, so the tiny model reads those (one
# token per 8x8 pixels instead of 16x16; see tiny_lens).
LENS_WIDTH = 64
LENS_TAPS = 4
LENS_ENCODER_WIDTH = 32
LENS_SHRINK = {"num_attention_heads": 2, "attention_head_dim": 32, "axes_dims_rope": [4, 14, 14]}
# GPT-OSS-20B cut to 32 wide with two heads of 16 (one key/value head) and 4 of its 32 experts (2
# active); its 24 layers stay, since the DiT reads layers 5, 11, 17 and 23.
GPT_OSS_TINY = {
    "hidden_size": LENS_ENCODER_WIDTH,
    "intermediate_size": 32,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
}


def lens_layout(channels):
    """Lens's detected layout over `channels` latent channels."""
    return {
        "transformer_blocks.0.attn.norm_added_q.weight": (1,),
        "transformer_blocks.0.img_mlp.w1.weight": (1,),
        **blocks("transformer_blocks", 2),
        "img_in.weight": (LENS_WIDTH, channels),
        "proj_out.weight": (channels, LENS_WIDTH),
        **{f"txt_norm.{i}.weight": (LENS_ENCODER_WIDTH,) for i in range(LENS_TAPS)},
    }


def lens_tokenizer_data():
    """The tokenizer a Lens encoder file carries ("tokenizer_json": GPT-OSS's o200k_harmony, which
    ComfyUI does not ship) replaced by the byte-level BPE of Llama 3 that it does: its 128256 ids
    all fit GPT-OSS's 201088-entry embedding. The Harmony chat template is then tokenized as text,
    so the 97 template tokens the encoder drops (txt_offset) are fewer than the template's 126 here
    and the features keep the template's last tokens before the prompt."""
    with open(os.path.join(LLAMA_TOKENIZER_DIR, "tokenizer.json"), "rb") as f:
        return {"tokenizer_json": f.read()}


def lens_text_encoder(clip_target, generator):
    """ComfyUI's CLIP for the Lens encoder, loaded from a random checkpoint. Its layers are ComfyUI's
    mixed-precision Linear and MoE expert banks, which hold no weight until a checkpoint is loaded
    (comfy.sd.CLIP moves the model before, so it must come with one): the checkpoint is the state of
    a twin of the encoder whose deferred weights are drawn (std 1/sqrt(fan_in), as init_weights)
    and loaded through those layers' own state-dict loading."""
    options = {"dtype": torch.float32, "gpt_oss_config": GPT_OSS_TINY}
    twin = clip_target.clip(device="cpu", dtype=torch.float32, model_options=options)
    init_weights(twin, generator)
    deferred = {}
    for name, layer in twin.named_modules():
        if hasattr(layer, "_orig_shape") and getattr(layer, "weight", None) is None:
            shape = layer._orig_shape  # (out, in), or (experts, out, in)
            deferred[f"{name}.weight"] = torch.empty(shape).normal_(0.0, shape[-1] ** -0.5, generator=generator)
    twin.load_state_dict(deferred, strict=False)
    return comfy.sd.CLIP(
        target=clip_target, model_options=options, tokenizer_data=lens_tokenizer_data(), state_dict=twin.state_dict()
    )


def tiny_lens(seed: int = 0):
    """Lens: ComfyUI's LensTransformer2DModel, its GPT-OSS-20B multi-layer encoder shrunk (through
    the "gpt_oss_config" option LensGptOssClipModel reads), and the real TAEF2, as Lens's latent
    space is FLUX.2's."""
    generator = torch.Generator().manual_seed(seed)
    vae = taef2_vae()
    channels = vae.latent_channels
    config = detected_model_config(lens_layout(channels), LENS_SHRINK, "Lens")
    config.latent_format.latent_channels = channels  # empty latents (sampling) in TAEF2's channels
    model = diffusion_model(config, generator)
    return model, lens_text_encoder(config.clip_target(), generator), vae


FAMILIES = {"lens": TinyFamily(tiny_lens, family="Lens", steps=100, needs=("Lens",), since="0.28.0")}
