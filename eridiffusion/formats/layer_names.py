"""The names other trainers give a ComfyUI model's layers, each resolved to the ComfyUI weight it changes:
diffusers' module names (from ComfyUI's own maps, and the tables below for Flux.2 and Wan, which ComfyUI
maps with Flux.1's names or not at all) and every prefix and separator a LoRA file may spell them with
(`transformer.`, `diffusion_model.`, `base_model.model.`, kohya's `lora_unet_` with underscores ...).
Where ComfyUI fuses layers diffusers keeps apart (Flux's and Z-Image's qkv), a name resolves to rows of
the fused weight."""

from dataclasses import dataclass
from typing import Any

# Prefixes LoRA files put before a dotted layer name: none (DiffSynth, Qwen, musubi's diffusers output),
# ComfyUI's and ai-toolkit's, diffusers' pipeline components, PEFT's save_pretrained.
DOTTED_PREFIXES = ("", "diffusion_model.", "transformer.", "unet.", "base_model.model.")
# Prefixes before a name whose dots became underscores: kohya sd-scripts and musubi-tuner (and ai-toolkit's
# UNet files), OneTrainer, SimpleTuner's LyCORIS.
UNDERSCORED_PREFIXES = ("lora_unet_", "lora_transformer_", "lycoris_")


def layer_naming(layer: str) -> str:
    """How a LoRA file's layer name is written, by its prefix: "lora_unet_<name_with_underscores>",
    "transformer.<name>", "<name>" ..."""
    prefix = next((p for p in UNDERSCORED_PREFIXES if layer.startswith(p)), None)
    if prefix is not None:
        return prefix + "<name_with_underscores>"
    prefix = next((p for p in DOTTED_PREFIXES if p and layer.startswith(p)), "")
    return f"{prefix}<name>"


@dataclass(frozen=True)
class LayerTarget:
    """The ComfyUI weight a LoRA layer changes: all of it, rows `rows` = (offset, size) of it, or all of it
    with its two halves swapped (diffusers' (scale, shift) modulation order against ComfyUI's (shift, scale))."""

    weight: str  # "diffusion_model.<name>.weight"
    rows: tuple[int, int] | None = None
    swap_halves: bool = False


# diffusers' Flux2Transformer2DModel names -> ComfyUI's Flux2 names; "{i}" is a block index, "qkv:n" the
# n-th third of a fused qkv weight.
FLUX2_NAMES = {
    "x_embedder": "img_in",
    "context_embedder": "txt_in",
    "time_guidance_embed.timestep_embedder.linear_1": "time_in.in_layer",
    "time_guidance_embed.timestep_embedder.linear_2": "time_in.out_layer",
    "time_guidance_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
    "time_guidance_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
    "double_stream_modulation_img.linear": "double_stream_modulation_img.lin",
    "double_stream_modulation_txt.linear": "double_stream_modulation_txt.lin",
    "single_stream_modulation.linear": "single_stream_modulation.lin",
    "proj_out": "final_layer.linear",
    "norm_out.linear": "final_layer.adaLN_modulation.1 swap",
    "transformer_blocks.{i}.attn.to_q": "double_blocks.{i}.img_attn.qkv qkv:0",
    "transformer_blocks.{i}.attn.to_k": "double_blocks.{i}.img_attn.qkv qkv:1",
    "transformer_blocks.{i}.attn.to_v": "double_blocks.{i}.img_attn.qkv qkv:2",
    "transformer_blocks.{i}.attn.add_q_proj": "double_blocks.{i}.txt_attn.qkv qkv:0",
    "transformer_blocks.{i}.attn.add_k_proj": "double_blocks.{i}.txt_attn.qkv qkv:1",
    "transformer_blocks.{i}.attn.add_v_proj": "double_blocks.{i}.txt_attn.qkv qkv:2",
    "transformer_blocks.{i}.attn.to_out.0": "double_blocks.{i}.img_attn.proj",
    "transformer_blocks.{i}.attn.to_add_out": "double_blocks.{i}.txt_attn.proj",
    "transformer_blocks.{i}.ff.linear_in": "double_blocks.{i}.img_mlp.0",
    "transformer_blocks.{i}.ff.linear_out": "double_blocks.{i}.img_mlp.2",
    "transformer_blocks.{i}.ff_context.linear_in": "double_blocks.{i}.txt_mlp.0",
    "transformer_blocks.{i}.ff_context.linear_out": "double_blocks.{i}.txt_mlp.2",
    "single_transformer_blocks.{i}.attn.to_qkv_mlp_proj": "single_blocks.{i}.linear1",
    "single_transformer_blocks.{i}.attn.to_out": "single_blocks.{i}.linear2",
}
# diffusers' WanTransformer3DModel names -> ComfyUI's WAN21 names.
WAN_NAMES = {
    "condition_embedder.text_embedder.linear_1": "text_embedding.0",
    "condition_embedder.text_embedder.linear_2": "text_embedding.2",
    "condition_embedder.time_embedder.linear_1": "time_embedding.0",
    "condition_embedder.time_embedder.linear_2": "time_embedding.2",
    "condition_embedder.time_proj": "time_projection.1",
    "condition_embedder.image_embedder.ff.net.0.proj": "img_emb.proj.1",
    "condition_embedder.image_embedder.ff.net.2": "img_emb.proj.3",
    "proj_out": "head.head",
    "blocks.{i}.attn1.to_q": "blocks.{i}.self_attn.q",
    "blocks.{i}.attn1.to_k": "blocks.{i}.self_attn.k",
    "blocks.{i}.attn1.to_v": "blocks.{i}.self_attn.v",
    "blocks.{i}.attn1.to_out.0": "blocks.{i}.self_attn.o",
    "blocks.{i}.attn2.to_q": "blocks.{i}.cross_attn.q",
    "blocks.{i}.attn2.to_k": "blocks.{i}.cross_attn.k",
    "blocks.{i}.attn2.to_v": "blocks.{i}.cross_attn.v",
    "blocks.{i}.attn2.to_out.0": "blocks.{i}.cross_attn.o",
    "blocks.{i}.attn2.add_k_proj": "blocks.{i}.cross_attn.k_img",
    "blocks.{i}.attn2.add_v_proj": "blocks.{i}.cross_attn.v_img",
    "blocks.{i}.ffn.net.0.proj": "blocks.{i}.ffn.0",
    "blocks.{i}.ffn.net.2": "blocks.{i}.ffn.2",
}


def weight_shapes(model: Any) -> dict[str, tuple[int, ...]]:
    """{"diffusion_model.<name>.weight": shape} of a ComfyUI model (BaseModel), parameters only."""
    return {k: tuple(v.shape) for k, v in model.state_dict().items() if k.startswith("diffusion_model.")}


def _from_table(table: dict[str, str], shapes: dict[str, tuple[int, ...]]) -> dict[str, LayerTarget]:
    """{diffusers name: LayerTarget} of a name table, for the blocks the model has."""
    blocks = {int(part) for key in shapes for part in key.split(".") if part.isdigit()}
    out: dict[str, LayerTarget] = {}
    for theirs, ours in table.items():
        for i in sorted(blocks) if "{i}" in theirs else [None]:
            name, _, how = ours.format(i=i).partition(" ")
            weight = f"diffusion_model.{name}.weight"
            if weight not in shapes:
                continue
            if how.startswith("qkv:"):
                third = shapes[weight][0] // 3
                out[theirs.format(i=i)] = LayerTarget(weight, (int(how[4:]) * third, third))
            else:
                out[theirs.format(i=i)] = LayerTarget(weight, swap_halves=how == "swap")
    return out


def _comfy_target(value: Any) -> LayerTarget | None:
    """A value of ComfyUI's LoRA key map as a LayerTarget (None: a bias, or a transform not handled here)."""
    import comfy.utils

    if isinstance(value, str):
        return LayerTarget(value) if value.endswith(".weight") else None
    weight, rows, *transform = value
    if rows is not None and not transform:
        dim, offset, size = rows
        return LayerTarget(weight, (offset, size)) if dim == 0 else None
    if rows is None and transform == [comfy.utils.swap_scale_shift]:
        return LayerTarget(weight, swap_halves=True)
    return None


def diffusers_layers(model: Any) -> dict[str, LayerTarget]:
    """{diffusers module name: LayerTarget} of a ComfyUI model (BaseModel); {} for a family diffusers
    names as ComfyUI does (Qwen-Image) or that has no diffusers map here."""
    import comfy.model_base
    import comfy.utils

    config = model.model_config.unet_config
    shapes = weight_shapes(model)
    if isinstance(model, comfy.model_base.Flux2):
        return _from_table(FLUX2_NAMES, shapes)
    if isinstance(model, comfy.model_base.WAN21):
        return _from_table(WAN_NAMES, shapes)
    maps = (
        (comfy.model_base.Flux, comfy.utils.flux_to_diffusers),
        (comfy.model_base.Lumina2, comfy.utils.z_image_to_diffusers),
        (comfy.model_base.SD3, comfy.utils.mmdit_to_diffusers),
        (comfy.model_base.AuraFlow, comfy.utils.auraflow_to_diffusers),
        (comfy.model_base.PixArt, comfy.utils.pixart_to_diffusers),
    )
    for cls, to_diffusers in maps:
        if isinstance(model, cls):
            named = to_diffusers(config, output_prefix="diffusion_model.")
            break
    else:  # UNets (an empty map for other models)
        named = {k: f"diffusion_model.{v}" for k, v in comfy.utils.unet_to_diffusers(config).items()}
        # ComfyUI maps label_emb to both; diffusers' SDXL (sequential class input) names it add_embedding
        unused = "class_embedding." if config.get("num_classes") == "sequential" else "add_embedding."
        named = {k: v for k, v in named.items() if not k.startswith(unused)}
    out: dict[str, LayerTarget] = {}
    for key, value in named.items():
        target = _comfy_target(value) if key.endswith(".weight") else None
        if target is not None and target.weight in shapes:
            out[key[: -len(".weight")]] = target
    if isinstance(model, comfy.model_base.Lumina2):
        out.update(_grouped_query_rows(out, config))
    return out


def _grouped_query_rows(named: dict[str, LayerTarget], config: dict[str, Any]) -> dict[str, LayerTarget]:
    """Lumina 2's q, k and v rows of its fused qkv: k and v have n_kv_heads heads, fewer than q's n_heads
    (ComfyUI's Z-Image map cuts the weight in equal thirds, which holds for Z-Image alone)."""
    head = config["dim"] // config["n_heads"]
    q, kv = config["n_heads"] * head, config.get("n_kv_heads", config["n_heads"]) * head
    rows = {"to_q": (0, q), "to_k": (q, kv), "to_v": (q + kv, kv)}
    return {
        name: LayerTarget(target.weight, rows[name.rpartition(".")[2]])
        for name, target in named.items()
        if target.rows is not None and name.rpartition(".")[2] in rows
    }


def spellings(name: str) -> list[str]:
    """Every way a LoRA file may write layer `name` (dotted, without prefix)."""
    underscored = name.replace(".", "_")
    return [p + name for p in DOTTED_PREFIXES] + [p + underscored for p in UNDERSCORED_PREFIXES]


def layer_table(model: Any) -> dict[str, LayerTarget]:
    """{layer name as a LoRA file may write it: LayerTarget} for ComfyUI model `model`: ComfyUI's own LoRA
    key map first (what stock ComfyUI loads), then every spelling of its weights' names and of their
    diffusers names. A spelling two different layers would share is left out."""
    import comfy.lora

    own: dict[str, LayerTarget] = {}
    for key, value in comfy.lora.model_lora_keys_unet(model, {}).items():
        target = _comfy_target(value)
        if target is not None:
            own[key] = target
    names = {
        k[len("diffusion_model.") : -len(".weight")]: LayerTarget(k)
        for k in weight_shapes(model)
        if k.endswith(".weight")
    }
    diffusers = diffusers_layers(model)
    table: dict[str, LayerTarget] = {}
    clashes: set[str] = set()
    for name, target in [*names.items(), *diffusers.items()]:
        for spelled in spellings(name):
            if spelled in own or spelled in clashes:
                continue
            if table.setdefault(spelled, target) != target:
                del table[spelled]
                clashes.add(spelled)
    # where ComfyUI's own map cuts a fused weight otherwise than its layers are (Lumina 2's k and v), ours holds
    corrected = {
        spelled: target
        for name, target in diffusers.items()
        for spelled in spellings(name)
        if spelled in own and own[spelled].weight == target.weight and own[spelled] != target
    }
    return {**table, **own, **corrected}


def is_unet(model: Any) -> bool:
    return "num_res_blocks" in model.model_config.unet_config
