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


def _in_diffusers_names(comfy_header, names):
    """A {key: (shape, dtype)} header of ComfyUI-named weights in diffusers' names, by ComfyUI's own map
    {diffusers name: ComfyUI name, or (ComfyUI name, (dim, start, length), ...) for a slice of a fused
    weight}, as comfy.sd.load_diffusion_model reads such files."""
    out = {}
    for name, target in names.items():
        comfy_name = target if isinstance(target, str) else target[0]
        if comfy_name not in comfy_header:
            continue
        shape, dtype = comfy_header[comfy_name]
        if not isinstance(target, str) and target[1] is not None:
            dim, _, length = target[1]
            shape = shape[:dim] + (length,) + shape[dim + 1 :]
        out[name] = (shape, dtype)
    return out


def _shapes(model):
    return {k: tuple(v.shape) for k, v in model.diffusion_model.state_dict().items()}


def test_a_full_size_sdxl_unet_in_diffusers_names_gives_comfyuis_sdxl_model():
    import comfy.supported_models
    import comfy.utils

    from bench.full_size import SDXL_UNET

    with torch.device("meta"):
        comfy_model = comfy.supported_models.SDXL(dict(SDXL_UNET)).get_model({}, "")
    header = {k: (tuple(v.shape), "F16") for k, v in comfy_model.diffusion_model.state_dict().items()}
    diffusers = _in_diffusers_names(header, comfy.utils.unet_to_diffusers(dict(SDXL_UNET)))
    assert "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q.weight" in diffusers
    model = layout_from_shapes(diffusers, "sdxl_unet_diffusers.safetensors")
    assert type(model).__name__ == "SDXL" and _shapes(model) == _shapes(comfy_model)


def test_a_full_size_flux_in_diffusers_names_gives_comfyuis_flux_model_with_its_fused_layers():
    import comfy.utils

    header = _flux_dev_header()
    names = comfy.utils.flux_to_diffusers({"depth": 19, "depth_single_blocks": 38, "hidden_size": 3072})
    diffusers = _in_diffusers_names(header, names)
    assert diffusers["transformer_blocks.0.attn.to_q.weight"][0] == (3072, 3072)  # one third of qkv
    model = layout_from_shapes(diffusers, "flux1-dev_diffusers.safetensors")
    comfy_model = layout_from_shapes(header, "flux1-dev.safetensors")
    assert type(model).__name__ == "Flux" and _shapes(model) == _shapes(comfy_model)


def test_a_lora_converts_for_a_diffusers_format_flux_as_for_the_same_flux_in_comfyuis_names(tmp_path):
    """convert's layout from a diffusers-format Flux.1-dev header: a diffusers-named LoRA of block 0's q, k
    and v (which ComfyUI fuses into one qkv weight) and of a single block lands on the same ComfyUI keys
    with the same tensors as from the ComfyUI-named header."""
    import comfy.utils

    from eridiffusion.lora_tools.convert import convert_lora

    header = _flux_dev_header()
    names = comfy.utils.flux_to_diffusers({"depth": 19, "depth_single_blocks": 38, "hidden_size": 3072})
    layouts = [layout_from_shapes(header, "flux"), layout_from_shapes(_in_diffusers_names(header, names), "diffusers")]
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for layer, width in (
        ("transformer_blocks.0.attn.to_q", 3072),
        ("transformer_blocks.0.attn.to_k", 3072),
        ("transformer_blocks.0.attn.to_v", 3072),
        ("single_transformer_blocks.5.proj_out", 3072),
    ):
        tensors[f"transformer.{layer}.lora_A.weight"] = torch.randn(
            2, 3072 if "proj_out" not in layer else 15360, generator=generator
        )
        tensors[f"transformer.{layer}.lora_B.weight"] = torch.randn(width, 2, generator=generator)
    source = str(tmp_path / "lora.safetensors")
    safetensors.torch.save_file(tensors, source)
    outputs = []
    for i, model in enumerate(layouts):
        path = convert_lora(source, str(tmp_path / f"out{i}.safetensors"), model).path
        outputs.append(safetensors.torch.load_file(path))
    assert outputs[0].keys() == outputs[1].keys()
    assert any("double_blocks_0_img_attn_qkv" in k for k in outputs[0]) and any(
        "single_blocks_5_" in k for k in outputs[0]
    )
    assert all(torch.equal(outputs[0][k], outputs[1][k]) for k in outputs[0])


def test_a_diffusers_folder_without_one_model_file_set_is_refused_naming_it(tmp_path):
    """A folder with no diffusers weights, and one with two precision variants, are named before any read."""
    empty = tmp_path / "empty" / "transformer"
    empty.mkdir(parents=True)
    with pytest.raises(EriDiffusionError, match=r"empty is a folder without a diffusers diffusion model"):
        model_layout(str(tmp_path / "empty"))
    both = tmp_path / "both"
    both.mkdir()
    for variant in ("fp16", "bf16"):
        safetensors.torch.save_file({"x": torch.zeros(1)}, str(both / f"diffusion_pytorch_model.{variant}.safetensors"))
    with pytest.raises(EriDiffusionError, match=r"holds the model in several precisions \(bf16, fp16\)"):
        model_layout(str(both))
