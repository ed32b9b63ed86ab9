"""The command line's model layouts: ComfyUI's own model class from a file's header alone, on the meta device."""

import pytest
import safetensors.torch
import torch

from eridiffusion.errors import EriDiffusionError
from eridiffusion.lora_tools.model_layout import layout_from_shapes, model_layout, weight_reader


def _flux_dev_header():
    """The {key: (shape, dtype)} header of a full-size Flux.1-dev diffusion model (3072 wide, 19 double and
    38 single blocks): the keys ComfyUI's detection reads, built by ComfyUI on the meta device."""
    import comfy.model_detection

    keys = {
        "img_in.weight": (3072, 64),
        "txt_in.weight": (3072, 4096),
        "vector_in.in_layer.weight": (3072, 768),
        "guidance_in.in_layer.weight": (3072, 256),
        "double_blocks.0.img_attn.norm.key_norm.scale": (128,),
        **{f"double_blocks.{i}.img_attn.qkv.weight": (9216, 3072) for i in range(19)},
        **{f"single_blocks.{i}.linear1.weight": (21504, 3072) for i in range(38)},
    }
    state_dict = {k: torch.empty(shape, device="meta") for k, shape in keys.items()}
    with torch.device("meta"):
        model = comfy.model_detection.model_config_from_unet(state_dict, "").get_model(state_dict, "")
    return {k: (tuple(v.shape), "BF16") for k, v in model.diffusion_model.state_dict().items()}


def test_a_full_size_flux_header_gives_its_layers_without_any_weight():
    model = layout_from_shapes(_flux_dev_header(), "flux1-dev.safetensors")
    import comfy.lora

    key_map = comfy.lora.model_lora_keys_unet(model, {})
    assert type(model).__name__ == "Flux"
    assert (
        key_map["transformer.single_transformer_blocks.37.attn.to_q"][0]
        == "diffusion_model.single_blocks.37.linear1.weight"
    )
    assert {p.device.type for p in model.parameters()} == {"meta"}


def test_a_file_no_model_class_matches_is_refused_naming_it(tmp_path):
    path = str(tmp_path / "not_a_model.safetensors")
    safetensors.torch.save_file({"embedding.weight": torch.zeros(4, 4)}, path)
    with pytest.raises(
        EriDiffusionError, match=r"not_a_model.safetensors: ComfyUI does not recognise the diffusion model"
    ):
        model_layout(path)


def test_the_weight_reader_gives_a_weight_by_its_comfyui_key_from_a_diffusion_model_or_a_checkpoint(tmp_path):
    weights = {"double_blocks.0.img_attn.qkv.weight": torch.randn(6, 2), "img_in.weight": torch.randn(2, 4)}
    bare, checkpoint = str(tmp_path / "dm.safetensors"), str(tmp_path / "ckpt.safetensors")
    safetensors.torch.save_file(weights, bare)
    safetensors.torch.save_file({f"model.diffusion_model.{k}": v for k, v in weights.items()}, checkpoint)
    for path in (bare, checkpoint):
        read = weight_reader(path)
        assert torch.equal(
            read("diffusion_model.double_blocks.0.img_attn.qkv.weight"), weights["double_blocks.0.img_attn.qkv.weight"]
        )
        assert read("diffusion_model.not_there.weight") is None
