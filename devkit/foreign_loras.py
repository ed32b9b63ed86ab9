"""A LoRA file of ours rewritten as other trainers write theirs, for the convert tests: the layer names,
prefixes and tensor names each one uses, and PEFT's own files written by `peft` itself (save_pretrained,
and the diffusers pipeline layout with its `lora_adapter_metadata`)."""

import json
import os
from dataclasses import dataclass

import safetensors.torch
import torch

from eridiffusion.formats.layer_names import diffusers_layers, weight_shapes


@dataclass(frozen=True)
class Convention:
    prefix: str  # before the layer name
    names: str  # "comfyui": ComfyUI's (the original model's) names; "diffusers": diffusers' names
    underscored: bool  # dots in the name written as underscores (kohya's style)
    tensors: str  # "kohya": lora_down/lora_up/alpha (LyCORIS names as they are); "peft": lora_A/lora_B, no alpha


def convention(fmt, arch):
    """How trainer `fmt` writes a LoRA of tiny family `arch` (a key of devkit.tiny_models.TINY_FAMILIES)."""
    unet = arch in ("sd15", "sdxl")
    dit_prefix = "transformer." if arch.startswith("flux") else "diffusion_model."
    table = {
        # kohya sd-scripts: the original model's names (LDM's for SDXL, BFL's for Flux)
        "kohya": Convention("lora_unet_", "comfyui", True, "kohya"),
        # musubi-tuner: its models' own names; its Z-Image keeps to_q/to_k/to_v apart as diffusers does
        "musubi-tuner": Convention("lora_unet_", "diffusers" if arch == "z_image" else "comfyui", True, "kohya"),
        # ai-toolkit: kohya-style keys of diffusers' names for UNets; diffusers names with lora_A/lora_B else
        "ai-toolkit": Convention("lora_unet_", "diffusers", True, "kohya")
        if unet
        else Convention(dit_prefix, "diffusers", False, "peft"),
        "onetrainer": Convention("lora_unet_" if unet else "lora_transformer_", "diffusers", True, "kohya"),
        "simpletuner-lycoris": Convention("lycoris_", "diffusers", True, "kohya"),
    }
    return table[fmt]


def foreign_layers(model, path, names):
    """{layer name (dotted, no prefix): {tensor name: tensor}} of our ComfyUI-keyed LoRA file `path` for
    ComfyUI model `model`, named "comfyui" or "diffusers"; a fused weight's LoRA becomes one per part
    (the same down, its rows of up)."""
    from eridiffusion.formats.lora_file import loadable_weight_keys, tensor_groups

    by_prefix = {prefix: weight for weight, prefix in loadable_weight_keys(model).items()}
    groups = {by_prefix[prefix]: group for prefix, group in tensor_groups(safetensors.torch.load_file(path)).items()}
    parts = {}
    for name, target in diffusers_layers(model).items():
        parts.setdefault(target.weight, []).append((name, target))
    shapes, out = weight_shapes(model), {}
    for weight, group in groups.items():
        native = weight[len("diffusion_model.") : -len(".weight")]
        mine = parts.get(weight) if names == "diffusers" else None
        full = [p for p in mine or [] if p[1].rows is None]
        if not mine or full:
            name, target = full[0] if full else (native, None)
            out[name] = _swapped(group) if target is not None and target.swap_halves else group
            continue
        assert sum(t.rows[1] for _, t in mine) == shapes[weight][0], weight
        for name, target in mine:
            offset, size = target.rows
            out[name] = {**group, "lora_up.weight": group["lora_up.weight"][offset : offset + size].clone()}
    return out


def _swapped(group):
    up = group["lora_up.weight"]
    return {**group, "lora_up.weight": torch.cat(up.chunk(2, dim=0)[::-1], dim=0)}


def write_convention(model, path, fmt, arch, output):
    """Our LoRA file `path` written as trainer `fmt` writes a LoRA of `arch`; returns `output`."""
    conv = convention(fmt, arch)
    out = {}
    for name, group in foreign_layers(model, path, conv.names).items():
        key = conv.prefix + (name.replace(".", "_") if conv.underscored else name)
        if conv.tensors == "kohya" or "lora_down.weight" not in group:  # LyCORIS' own names (LoKr, LoHa)
            out.update({f"{key}.{n}": t for n, t in group.items()})
            continue
        rank = group["lora_down.weight"].shape[0]
        scale = float(group["alpha"]) / rank  # no alpha in the file: scale 1, so the scale goes into lora_B
        out[f"{key}.lora_A.weight"] = group["lora_down.weight"]
        out[f"{key}.lora_B.weight"] = group["lora_up.weight"] * scale
    safetensors.torch.save_file({k: v.clone().contiguous() for k, v in out.items()}, output)
    return output


def _peft_model(layers):
    """A module tree of nn.Linear at `layers`' names, wrapped by peft with one LoRA of their rank and alpha,
    set to their weights."""
    from peft import LoraConfig, get_peft_model

    root = torch.nn.Module()
    for name, group in layers.items():
        _add_linear(root, name, group["lora_down.weight"].shape[1], group["lora_up.weight"].shape[0])
    ranks = {g["lora_down.weight"].shape[0] for g in layers.values()}
    alphas = {float(g["alpha"]) for g in layers.values()}
    assert len(ranks) == len(alphas) == 1, (ranks, alphas)
    config = LoraConfig(r=ranks.pop(), lora_alpha=alphas.pop(), target_modules=sorted(layers))
    model = get_peft_model(root, config)
    with torch.no_grad():
        for name, group in layers.items():
            module = model.base_model.model.get_submodule(name)
            module.lora_A["default"].weight.copy_(group["lora_down.weight"])
            module.lora_B["default"].weight.copy_(group["lora_up.weight"])
    return model


def write_peft(model, path, arch, folder, layout):
    """Our LoRA file `path` written by peft: layout "peft" = save_pretrained into `folder`
    (adapter_model.safetensors + adapter_config.json), "diffusers" = diffusers' pipeline file
    (`transformer.`/`unet.` keys, the LoraConfig in `lora_adapter_metadata`). Returns the weights file."""
    from peft import get_peft_model_state_dict

    peft_model = _peft_model(foreign_layers(model, path, "diffusers"))
    os.makedirs(folder, exist_ok=True)
    if layout == "peft":
        peft_model.save_pretrained(folder)
        return os.path.join(folder, "adapter_model.safetensors")
    component = "unet" if arch in ("sd15", "sdxl") else "transformer"
    state = get_peft_model_state_dict(peft_model)
    tensors = {f"{component}.{k[len('base_model.model.') :]}": v.contiguous() for k, v in state.items()}
    config = peft_model.peft_config["default"].to_dict()
    config = {f"{component}.{k}": sorted(v) if isinstance(v, set) else v for k, v in config.items()}
    output = os.path.join(folder, "pytorch_lora_weights.safetensors")
    metadata = {"format": "pt", "lora_adapter_metadata": json.dumps(config, default=str, sort_keys=True)}
    safetensors.torch.save_file(tensors, output, metadata=metadata)
    return output


def peft_deltas(path):
    """{module name: ΔW} of a diffusers-layout PEFT file (`<component>.<module>.lora_A/B.weight` and its
    `lora_adapter_metadata`) as peft itself computes them: its LoraConfig rebuilt from the metadata, a
    module tree of its layers, the weights set with set_peft_model_state_dict."""
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

    with safetensors.safe_open(path, "pt") as f:
        packed = json.loads(f.metadata()["lora_adapter_metadata"])
    tensors = safetensors.torch.load_file(path)
    component = next(iter(tensors)).split(".", 1)[0]
    config = {k.split(".", 1)[1]: v for k, v in packed.items()}
    fields = ("r", "lora_alpha", "rank_pattern", "alpha_pattern", "target_modules")
    root = torch.nn.Module()
    state, modules = {}, []
    for key, tensor in tensors.items():
        module, _, tensor_name = key[len(component) + 1 :].rpartition(".lora_")
        state[f"base_model.model.{module}.lora_{tensor_name}"] = tensor
        if tensor_name == "A.weight":
            _add_linear(root, module, tensor.shape[1], tensors[key.replace("lora_A", "lora_B")].shape[0])
            modules.append(module)
    model = get_peft_model(root, LoraConfig(**{k: config[k] for k in fields}))
    result = set_peft_model_state_dict(model, state)
    assert not result.unexpected_keys, result.unexpected_keys
    base = model.base_model.model
    with torch.no_grad():
        # (every module of the file: peft's own files list target_modules as name suffixes, "to_q", "2")
        return {name: base.get_submodule(name).get_delta_weight("default") for name in modules}


def _add_linear(root, name, in_features, out_features):
    parent = root
    *path, leaf = name.split(".")
    for part in path:
        if not hasattr(parent, part):
            parent.add_module(part, torch.nn.Module())
        parent = getattr(parent, part)
    parent.add_module(leaf, torch.nn.Linear(in_features, out_features, bias=False))


def write_peft_dora(model, path, folder):
    """Our LoRA file `path` as a PEFT DoRA written by peft's save_pretrained into `folder`: the layers
    (diffusers' names) on ComfyUI model `model`'s own weights, the LoRA factors ours, each magnitude
    PEFT's initial row norm scaled by a seeded factor in [0.9, 1.1]. Returns (weights file, {diffusers
    name: W' as peft merges it})."""
    from peft import LoraConfig, get_peft_model

    layers = foreign_layers(model, path, "diffusers")
    targets, weights = diffusers_layers(model), model.state_dict()
    root = torch.nn.Module()
    for name, group in layers.items():
        _add_linear(root, name, group["lora_down.weight"].shape[1], group["lora_up.weight"].shape[0])
        target = targets.get(name)
        weight = weights[target.weight if target else f"diffusion_model.{name}.weight"]
        rows = weight[target.rows[0] : target.rows[0] + target.rows[1]] if target and target.rows else weight
        rows = torch.cat(rows.chunk(2)[::-1]) if target and target.swap_halves else rows
        root.get_submodule(name).weight.data.copy_(rows)
    (rank,), (alpha,) = (
        {g["lora_down.weight"].shape[0] for g in layers.values()},
        {float(g["alpha"]) for g in layers.values()},
    )
    peft_model = get_peft_model(
        root, LoraConfig(r=rank, lora_alpha=alpha, target_modules=sorted(layers), use_dora=True)
    )
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, group in layers.items():
            module = peft_model.base_model.model.get_submodule(name)
            module.lora_A["default"].weight.copy_(group["lora_down.weight"])
            module.lora_B["default"].weight.copy_(group["lora_up.weight"])
            magnitude = module.lora_magnitude_vector["default"].weight
            magnitude.mul_(0.9 + 0.2 * torch.rand(magnitude.shape, generator=generator))
    peft_model.save_pretrained(folder)
    merged = peft_model.merge_and_unload()
    return os.path.join(folder, "adapter_model.safetensors"), {
        n: merged.get_submodule(n).weight.detach().clone() for n in layers
    }


# diffusers' text-encoder components of SDXL, by ComfyUI's CLIP state-dict prefix
_SDXL_TEXT_ENCODERS = {"clip_l.transformer.": "text_encoder", "clip_g.transformer.": "text_encoder_2"}


def write_diffusers_with_text_encoders(model, clip, path, output, text_alpha, rank=8, seed=3):
    """Our SDXL LoRA file `path` with random LoRAs of the CLIP's attention projections added, written as
    diffusers writes an SDXL LoRA trained with its text encoders: `unet.`, `text_encoder.` and
    `text_encoder_2.` layers (lora_A/lora_B), each component's LoraConfig packed under its name in
    `lora_adapter_metadata` (the text encoders' at alpha `text_alpha`). Also the same text-encoder LoRAs in
    kohya's names with their alpha ({key: tensor}), for ComfyUI's loader to compare against."""
    import tempfile

    generator = torch.Generator().manual_seed(seed)
    with tempfile.TemporaryDirectory() as folder:
        unet_file = write_peft(model, path, "sdxl", folder, "diffusers")
        tensors = safetensors.torch.load_file(unet_file)
        with safetensors.safe_open(unet_file, "pt") as f:
            packed = json.loads(f.metadata()["lora_adapter_metadata"])
    kohya = {}
    weights = clip.cond_stage_model.state_dict()
    for key, weight in weights.items():
        prefix = next((p for p in _SDXL_TEXT_ENCODERS if key.startswith(p)), None)
        if prefix is None or not key.endswith(("self_attn.q_proj.weight", "self_attn.v_proj.weight")):
            continue
        component = _SDXL_TEXT_ENCODERS[prefix]
        module = key[len(prefix) : -len(".weight")]
        down = torch.randn(rank, weight.shape[1], generator=generator) * 0.1
        up = torch.randn(weight.shape[0], rank, generator=generator) * 0.1
        tensors[f"{component}.{module}.lora_A.weight"] = down
        tensors[f"{component}.{module}.lora_B.weight"] = up
        kohya_name = ("lora_te1_" if component == "text_encoder" else "lora_te2_") + module.replace(".", "_")
        kohya.update(
            {
                f"{kohya_name}.lora_down.weight": down,
                f"{kohya_name}.lora_up.weight": up,
                f"{kohya_name}.alpha": torch.tensor(float(text_alpha)),
            }
        )
        for name, value in (("r", rank), ("lora_alpha", text_alpha), ("target_modules", ["q_proj", "v_proj"])):
            packed[f"{component}.{name}"] = value
    metadata = {"format": "pt", "lora_adapter_metadata": json.dumps(packed, sort_keys=True)}
    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()}, output, metadata=metadata)
    return output, kohya


def foreign_file(lora, fmt, folder):
    """A family_lora fixture's LoRA ({"model", "path", "arch"}) written as trainer `fmt` writes one (peft's
    own files for "peft" and "diffusers") into pathlib folder `folder`; returns the weights file."""
    if fmt in ("peft", "diffusers"):
        return write_peft(lora["model"].model, lora["path"], lora["arch"], str(folder / fmt), fmt)
    return write_convention(lora["model"].model, lora["path"], fmt, lora["arch"], str(folder / f"{fmt}.safetensors"))
