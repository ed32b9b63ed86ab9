"""Tiny random-weight SD1.5 and SDXL stacks (diffusion model, text encoders, VAE) built from
ComfyUI's own classes: the TinyDemoModel node, the demo and `model: tiny-sdxl` train on them where
no checkpoint is at hand. The builders here are also how the tests shrink every other family.
Import once ComfyUI is on sys.path."""

from dataclasses import dataclass

import comfy.model_management as mm
import comfy.model_patcher
import comfy.sd
import comfy.supported_models
import comfy.taesd.taesd
import torch

from .errors import EriDiffusionError
from .settings import check_settings, setting

# Text encoders keep the real vocabulary (ComfyUI's real tokenizers feed them) and shrink the rest.
# Three layers, not two: SDXL reads the penultimate layer (layer_idx=-2) and SDClipModel asserts
# abs(layer_idx) < num_layers. No projection_dim: ComfyUI's text_projection is hidden x hidden,
# so the pooled output is hidden_size wide.
CLIP_L = {"hidden_size": 32, "intermediate_size": 128, "num_attention_heads": 2, "num_hidden_layers": 3}
CLIP_G = {"hidden_size": 64, "intermediate_size": 256, "num_attention_heads": 4, "num_hidden_layers": 3}
TINY_CLIPS = {"clip_l_model_config": CLIP_L, "clip_g_model_config": CLIP_G}

# SDXL's adm vector: clip_g's pooled output, then 6 Timestep(256) embeddings of
# height, width, crop_h, crop_w, target_height, target_width (model_base.SDXL.encode_adm).
SDXL_SIZE_EMBEDDING = 6 * 256

# ComfyUI's model_detection configs with the widths cut down; the layout (levels, res blocks,
# where the transformers sit) is the real one so adapter targets have the real key names.
SD15_UNET = {
    "use_checkpoint": False,
    "image_size": 32,
    "in_channels": 4,
    "out_channels": 4,
    "use_spatial_transformer": True,
    "legacy": False,
    "adm_in_channels": None,
    "model_channels": 32,
    "num_res_blocks": [2, 2, 2],
    "channel_mult": [1, 2, 4],
    "transformer_depth": [1, 1, 1, 1, 0, 0],
    "transformer_depth_middle": 1,
    "transformer_depth_output": [1, 1, 1, 1, 1, 1, 0, 0, 0],
    "use_linear_in_transformer": False,
    "context_dim": CLIP_L["hidden_size"],
    "use_temporal_attention": False,
    "use_temporal_resblock": False,
}
SDXL_UNET = {
    "use_checkpoint": False,
    "image_size": 32,
    "in_channels": 4,
    "out_channels": 4,
    "use_spatial_transformer": True,
    "legacy": False,
    "num_classes": "sequential",
    "adm_in_channels": CLIP_G["hidden_size"] + SDXL_SIZE_EMBEDDING,
    "model_channels": 32,
    "num_res_blocks": [2, 2, 2],
    "channel_mult": [1, 2, 4],
    "transformer_depth": [0, 0, 1, 1, 1, 1],
    "transformer_depth_middle": 1,
    "transformer_depth_output": [0, 0, 0, 1, 1, 1, 1, 1, 1],
    "use_linear_in_transformer": True,
    "context_dim": CLIP_L["hidden_size"] + CLIP_G["hidden_size"],
    "use_temporal_attention": False,
    "use_temporal_resblock": False,
}

# The model config classes overwrite num_heads/num_head_channels from their unet_extra_config
# (SD15: 8 heads, SDXL: 64-wide heads), which at these widths means 4-wide or single heads.
HEADS = {"num_heads": -1, "num_head_channels": 16}


def init_weights(module: torch.nn.Module, generator: torch.Generator) -> None:
    """Fill every parameter from `generator`: ComfyUI's ops skip reset_parameters, so freshly built
    layers hold uninitialised memory. Values are drawn on the CPU in float32 and copied in, so a
    seed gives the same weights on any device. Matrices get std 1/sqrt(fan_in) so activations keep
    their scale through the network: a tiny model that carries signal learns in a few hundred
    CPU steps, which the training tests rely on."""
    with torch.no_grad():
        for sub in module.modules():
            is_norm = isinstance(sub, (torch.nn.GroupNorm, torch.nn.LayerNorm))
            for name, p in sub.named_parameters(recurse=False):
                if p.dim() == 0:
                    continue  # scalars (CLIP logit_scale, TAESD vae_scale/shift) are built with real values
                if is_norm and name == "weight":
                    value = torch.ones(p.shape)
                elif p.dim() >= 2:
                    fan_in = p[0].numel()
                    value = torch.empty(p.shape).normal_(0.0, fan_in**-0.5, generator=generator)
                else:
                    value = torch.empty(p.shape).normal_(0.0, 0.01, generator=generator)
                p.copy_(value)


def diffusion_model(model_config, generator, weight_dtype=torch.float32):
    """ComfyUI's model for `model_config` (a comfy.supported_models instance), random init, weights
    stored in `weight_dtype` (float8_e4m3fn: as UNETLoader's weight_dtype gives them, computed in
    float32 through ComfyUI's manual-cast layers)."""
    model_config.set_inference_dtype(weight_dtype, None if weight_dtype == torch.float32 else torch.float32)
    model = model_config.get_model({})
    init_weights(model, generator)
    model.eval()
    return comfy.model_patcher.ModelPatcher(
        model, load_device=mm.get_torch_device(), offload_device=mm.unet_offload_device()
    )


def text_encoder(clip_target, generator, model_options, tokenizer_data=None):
    """ComfyUI's CLIP object for `clip_target`, float32, random init. `model_options` may hold
    "<model_name>_model_config" dicts that SDClipModel merges over each encoder's JSON config;
    `tokenizer_data` is what a checkpoint would carry for its tokenizer (Gemma's "spiece_model")."""
    # float32 because ComfyUI's default text-encoder dtype is float16, even on the CPU.
    clip = comfy.sd.CLIP(
        target=clip_target, model_options={"dtype": torch.float32, **model_options}, tokenizer_data=tokenizer_data or {}
    )
    init_weights(clip.cond_stage_model, generator)
    return clip


def taesd_vae(latent_channels, latent_format, generator):
    """A random TAESD with `latent_channels` channels and the scale of `latent_format` (8x)."""
    taesd = comfy.taesd.taesd.TAESD(latent_channels=latent_channels)
    init_weights(taesd, generator)
    sd = taesd.state_dict()
    # Same scale as nodes.VAELoader gives the real taesd/taesdxl/taesd3/taef1, so after the
    # model's process_latent_in the diffusion model sees the TAESD encoder's own output.
    sd["vae_scale"] = torch.tensor(latent_format.scale_factor)
    sd["vae_shift"] = torch.tensor(getattr(latent_format, "shift_factor", 0.0))
    return comfy.sd.VAE(sd=sd)


def tiny_stack(model_config, seed, weight_dtype=torch.float32, clips=TINY_CLIPS):
    """(MODEL, CLIP, VAE) of a UNet model config with tiny widths: random weights from `seed`, the
    text encoders cut to `clips`, a 4-channel TAESD."""
    generator = torch.Generator().manual_seed(seed)
    model_config.unet_config.update(HEADS)
    model = diffusion_model(model_config, generator, weight_dtype)
    clip = text_encoder(model_config.clip_target(), generator, clips)
    vae = taesd_vae(4, model_config.latent_format, generator)
    return model, clip, vae


def tiny_sd15(
    seed: int = 0, weight_dtype=torch.float32
) -> tuple[comfy.model_patcher.ModelPatcher, comfy.sd.CLIP, comfy.sd.VAE]:
    """A random SD1.5 stack: ComfyUI's SD15 UNet, SD1 clip_l text encoder and a 4-channel TAESD."""
    return tiny_stack(comfy.supported_models.SD15(SD15_UNET), seed, weight_dtype)


def tiny_sdxl(seed: int = 0) -> tuple[comfy.model_patcher.ModelPatcher, comfy.sd.CLIP, comfy.sd.VAE]:
    """A random SDXL stack: ComfyUI's SDXL UNet, clip_l + clip_g text encoders and a 4-channel TAESD."""
    return tiny_stack(comfy.supported_models.SDXL(SDXL_UNET), seed)


TINY_BUILDERS = {"sd15": tiny_sd15, "sdxl": tiny_sdxl}


@dataclass(frozen=True)
class TinyDemoSettings:
    """TinyDemoModel's inputs."""

    architecture: str = setting("sdxl", "Which ComfyUI model class to shrink.", choices=tuple(TINY_BUILDERS))
    seed: int = setting(0, "Seed of the random weights.", minimum=0, maximum=0xFFFFFFFF, seed=True)

    def __post_init__(self) -> None:
        check_settings(self, "TinyDemoModel")


def build_tiny_demo(arch: str, seed: int = 0):
    """The tiny stack of `arch` ("sd15" or "sdxl")."""
    if arch not in TINY_BUILDERS:
        raise EriDiffusionError(f"unknown tiny architecture {arch!r}: use one of {sorted(TINY_BUILDERS)}")
    return TINY_BUILDERS[arch](seed)
