"""Tiny random-init SD1.5 and SDXL stacks (UNet, CLIP, VAE) built from ComfyUI's own classes, for
the tests and the CPU demo where no weights can be downloaded. Import after runtime.start_host()."""
import torch

import comfy.model_management as mm
import comfy.model_patcher
import comfy.sd
import comfy.supported_models
import comfy.taesd.taesd

from ..training.errors import EriDiffusionError

TINY_ARCHITECTURES = ("sd15", "sdxl")

# Text encoders keep the real vocabulary (ComfyUI's real tokenizers feed them) and shrink the rest.
# Three layers, not two: SDXL reads the penultimate layer (layer_idx=-2) and SDClipModel asserts
# abs(layer_idx) < num_layers. No projection_dim: ComfyUI's text_projection is hidden x hidden,
# so the pooled output is hidden_size wide.
CLIP_L = {"hidden_size": 32, "intermediate_size": 128, "num_attention_heads": 2, "num_hidden_layers": 3}
CLIP_G = {"hidden_size": 64, "intermediate_size": 256, "num_attention_heads": 4, "num_hidden_layers": 3}

# SDXL's adm vector: clip_g's pooled output, then 6 Timestep(256) embeddings of
# height, width, crop_h, crop_w, target_height, target_width (model_base.SDXL.encode_adm).
SDXL_SIZE_EMBEDDING = 6 * 256

# ComfyUI's model_detection configs with the widths cut down; the layout (levels, res blocks,
# where the transformers sit) is the real one so adapter targets have the real key names.
SD15_UNET = {"use_checkpoint": False, "image_size": 32, "in_channels": 4, "out_channels": 4,
             "use_spatial_transformer": True, "legacy": False, "adm_in_channels": None,
             "model_channels": 32, "num_res_blocks": [2, 2, 2], "channel_mult": [1, 2, 4],
             "transformer_depth": [1, 1, 1, 1, 0, 0], "transformer_depth_middle": 1,
             "transformer_depth_output": [1, 1, 1, 1, 1, 1, 0, 0, 0],
             "use_linear_in_transformer": False, "context_dim": CLIP_L["hidden_size"],
             "use_temporal_attention": False, "use_temporal_resblock": False}
SDXL_UNET = {"use_checkpoint": False, "image_size": 32, "in_channels": 4, "out_channels": 4,
             "use_spatial_transformer": True, "legacy": False, "num_classes": "sequential",
             "adm_in_channels": CLIP_G["hidden_size"] + SDXL_SIZE_EMBEDDING,
             "model_channels": 32, "num_res_blocks": [2, 2, 2], "channel_mult": [1, 2, 4],
             "transformer_depth": [0, 0, 1, 1, 1, 1], "transformer_depth_middle": 1,
             "transformer_depth_output": [0, 0, 0, 1, 1, 1, 1, 1, 1],
             "use_linear_in_transformer": True, "context_dim": CLIP_L["hidden_size"] + CLIP_G["hidden_size"],
             "use_temporal_attention": False, "use_temporal_resblock": False}

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
                    value = torch.empty(p.shape).normal_(0.0, fan_in ** -0.5, generator=generator)
                else:
                    value = torch.empty(p.shape).normal_(0.0, 0.01, generator=generator)
                p.copy_(value)


def _diffusion_model(model_config, generator):
    model_config.unet_config.update(HEADS)
    model_config.set_inference_dtype(torch.float32, None)
    model = model_config.get_model({})
    init_weights(model, generator)
    model.eval()
    return comfy.model_patcher.ModelPatcher(model, load_device=mm.get_torch_device(),
                                            offload_device=mm.unet_offload_device())


def _clip(model_config, generator):
    # comfy.sd.CLIP passes model_options down to SDClipModel, which merges "<name>_model_config"
    # over its JSON config: the stock SD1/SDXL clip classes, only smaller. float32 because
    # ComfyUI's default text-encoder dtype is float16, even on the CPU.
    model_options = {"dtype": torch.float32, "clip_l_model_config": CLIP_L, "clip_g_model_config": CLIP_G}
    clip = comfy.sd.CLIP(target=model_config.clip_target(), model_options=model_options)
    init_weights(clip.cond_stage_model, generator)
    return clip


def _vae(model_config, generator):
    taesd = comfy.taesd.taesd.TAESD(latent_channels=4)
    init_weights(taesd, generator)
    sd = taesd.state_dict()
    # Same scale as nodes.VAELoader gives the real taesd/taesdxl, so after the model's
    # process_latent_in the UNet sees the TAESD encoder's own output.
    sd["vae_scale"] = torch.tensor(model_config.latent_format.scale_factor)
    sd["vae_shift"] = torch.tensor(0.0)
    return comfy.sd.VAE(sd=sd)


def _stack(model_config, seed):
    generator = torch.Generator().manual_seed(seed)
    model = _diffusion_model(model_config, generator)
    clip = _clip(model_config, generator)
    vae = _vae(model_config, generator)
    return model, clip, vae


def tiny_sd15(seed: int = 0) -> tuple[comfy.model_patcher.ModelPatcher, comfy.sd.CLIP, comfy.sd.VAE]:
    """A random SD1.5 stack: ComfyUI's SD15 UNet, SD1 clip_l text encoder and a 4-channel TAESD."""
    return _stack(comfy.supported_models.SD15(SD15_UNET), seed)


def tiny_sdxl(seed: int = 0) -> tuple[comfy.model_patcher.ModelPatcher, comfy.sd.CLIP, comfy.sd.VAE]:
    """A random SDXL stack: ComfyUI's SDXL UNet, clip_l + clip_g text encoders and a 4-channel TAESD."""
    return _stack(comfy.supported_models.SDXL(SDXL_UNET), seed)


def build_tiny(arch: str, seed: int = 0):
    """tiny_sd15 or tiny_sdxl by name ("sd15", "sdxl")."""
    builders = {"sd15": tiny_sd15, "sdxl": tiny_sdxl}
    if arch not in builders:
        raise EriDiffusionError(f"unknown tiny architecture {arch!r}: use one of {TINY_ARCHITECTURES}")
    return builders[arch](seed)
