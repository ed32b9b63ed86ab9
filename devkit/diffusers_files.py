"""A small Flux saved as diffusers saves one, for the tests of the toolbox's --model: its transformer in
diffusers' names (ComfyUI's own map, comfy.utils.flux_to_diffusers, read backwards: a fused qkv written
as its q, k and v), in a pipeline folder's transformer/, sharded with diffusers' index. The Flux is one
ComfyUI's detection reads back from a file (one head of detection's fixed 128 width; the tiny stacks'
narrower heads are set after detection, which a file cannot carry)."""

import json
import os

import safetensors.torch
import torch

from devkit.detected_configs import blocks, detected_model_config
from eridiffusion.tiny_models import diffusion_model

DETECTABLE_FLUX = {
    "double_blocks.0.img_attn.norm.key_norm.scale": (128,),
    **blocks("double_blocks", 1),
    **blocks("single_blocks", 1),
    "img_in.weight": (128, 64),
    "txt_in.weight": (128, 32),
    "vector_in.in_layer.weight": (128, 32),
    "guidance_in.in_layer.weight": (128, 256),
}


def detectable_flux(seed=0):
    """A ModelPatcher of a Flux [dev] (1 double and 1 single block, 128 wide, random weights) that ComfyUI
    detects from its own weights; None on a ComfyUI whose detection fixes Flux's head count (0.3.x: 24
    heads of 128, so no Flux narrower than the full size reads back from a file there)."""
    config = detected_model_config(DETECTABLE_FLUX, None, "Flux")
    if config.unet_config["num_heads"] * 128 != config.unet_config["hidden_size"]:
        return None
    return diffusion_model(config, torch.Generator().manual_seed(seed))


def flux_in_diffusers_names(model):
    """{diffusers name: tensor} of Flux BaseModel `model`'s diffusion model."""
    import comfy.utils

    unet = model.model_config.unet_config
    names = comfy.utils.flux_to_diffusers(
        {"depth": unet["depth"], "depth_single_blocks": unet["depth_single_blocks"], "hidden_size": unet["hidden_size"]}
    )
    state = model.diffusion_model.state_dict()
    out = {}
    for name, target in names.items():
        comfy_name = target if isinstance(target, str) else target[0]
        if comfy_name not in state:
            continue
        weight = state[comfy_name]
        if not isinstance(target, str):
            if target[1] is not None:
                dim, start, length = target[1]
                weight = weight.narrow(dim, start, length)
            if len(target) > 2:
                weight = target[2](weight)  # swap_scale_shift: its own inverse
        out[name] = weight.detach().clone().contiguous()
    assert len({id(t) for t in out.values()}) == len(out)
    return out


def save_diffusers_pipeline_folder(tensors, folder, shards=2):
    """`tensors` written as a pipeline folder's transformer/ in `shards` files with their index, as
    diffusers' save_pretrained writes a large model; returns `folder`."""
    component = os.path.join(folder, "transformer")
    os.makedirs(component, exist_ok=True)
    keys = sorted(tensors)
    weight_map = {}
    for i in range(shards):
        name = f"diffusion_pytorch_model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: tensors[k] for k in keys[i::shards]}
        safetensors.torch.save_file(part, os.path.join(component, name))
        weight_map.update(dict.fromkeys(part, name))
    with open(os.path.join(component, "diffusion_pytorch_model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    with open(os.path.join(component, "config.json"), "w") as f:
        json.dump({"_class_name": "FluxTransformer2DModel"}, f)
    return folder
