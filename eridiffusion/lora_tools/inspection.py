"""`lora inspect`: what a LoRA file holds (keys, family, algorithm, rank and alpha per block, the
metadata of EriDiffusion and other trainers) and which of its keys a model would not load."""

import json
import re
from collections import Counter
from collections.abc import Collection, Container, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..formats.lora_conventions import peft_scales, peft_weights_file, split_key
from .lora_layers import layer_algorithm, rank_and_alpha, read_lora

# Metadata keys by who wrote them: ours, kohya's sd-scripts (and tools that copy its keys), modelspec.
_WRITERS = (
    (
        "eridiffusion",
        ("eridiffusion_", "architecture", "steps", "dataset_hash", "resolution", "training_config", "save_dtype"),
    ),
    ("kohya", ("ss_",)),
    ("modelspec", ("modelspec.",)),
)
# The family a file's keys give away, first match wins (when the metadata names none).
_FAMILY_BY_KEYS = (
    ("Flux.2", ("stream_modulation", "ff.linear_in", "ff_linear_in")),
    ("Flux", ("double_blocks", "single_blocks", "single_transformer_blocks")),
    ("Z-Image / Lumina 2", ("context_refiner", "noise_refiner")),
    ("Wan", ("cross_attn", "condition_embedder", "ffn.net", "ffn_net")),
    ("Qwen-Image", ("img_mlp", "txt_mlp", "img_mod", "txt_mod")),
    ("SD3", ("joint_blocks",)),
    ("SDXL", ("lora_te2_", "label_emb", "add_embedding")),
    ("SD1.x/SDXL UNet", ("input_blocks", "down_blocks")),
)
_TEXT_ENCODER = ("lora_te", "text_encoders.", "text_model.")


@dataclass
class Block:
    layers: int = 0
    ranks: Counter[int] = field(default_factory=Counter)
    alphas: Counter[float] = field(default_factory=Counter)
    algorithms: Counter[str] = field(default_factory=Counter)


@dataclass
class LoRAReport:
    path: str
    keys: int
    family: str
    family_source: str
    algorithms: dict[str, int]  # {algorithm: layer count}
    blocks: dict[str, Block]  # {block name: Block}
    metadata: dict[str, dict[str, str]]  # {writer: {key: value}}
    other_keys: list[str]
    alpha_source: str = "every layer has its alpha"  # or where the alphas of layers without one came from
    not_loaded: list[str] | None = None  # with a model: file keys whose layer the model does not address
    convertible: int | None = None  # of those, how many `lora convert` places for that model

    def lines(self) -> list[str]:
        out = [
            f"file       {self.path}",
            f"keys       {self.keys} in {sum(b.layers for b in self.blocks.values())} layers",
            f"family     {self.family} ({self.family_source})",
            "algorithm  " + ", ".join(f"{name} x{count}" for name, count in self.algorithms.items()),
            f"alphas     {self.alpha_source}",
            "blocks     (layers: rank / alpha)",
        ]
        for name, block in self.blocks.items():
            ranks = "/".join(map(str, sorted(block.ranks))) or "-"
            alphas = "/".join(f"{a:g}" for a in sorted(block.alphas)) or "-"
            kinds = ",".join(sorted(block.algorithms))
            out.append(f"  {name:<28} {block.layers:>4} {kinds}: rank {ranks} alpha {alphas}")
        for writer, values in self.metadata.items():
            out.append(f"metadata   {writer}:")
            out += [f"  {key} = {_short(value)}" for key, value in values.items()]
        if self.other_keys:
            out.append(f"other keys {len(self.other_keys)} that are no LoRA tensor, e.g. {self.other_keys[0]}")
        if self.not_loaded is not None:
            out.append(f"not loaded {len(self.not_loaded)} key(s) the model does not address")
            if self.convertible:
                out[-1] += f"; eridiffusion lora convert places {self.convertible} of them"
            out += [f"  {key}" for key in self.not_loaded[:20]] + (["  ..."] if len(self.not_loaded) > 20 else [])
        return out


def _short(value: str, limit: int = 100) -> str:
    return value if len(value) <= limit else value[:limit] + f"... ({len(value)} characters)"


def block_of(prefix: str) -> str:
    """The block a layer belongs to: its name up to the first index (`input_blocks.4`, `double_blocks.3`)."""
    if prefix.startswith(_TEXT_ENCODER):
        return "text encoder"
    name = re.sub(r"^(lora_unet_|diffusion_model\.|lycoris_|transformer\.|unet\.)", "", prefix)
    match = re.match(r"^(\D*?)[._]?(\d+)", name)
    return f"{match.group(1).strip('._')}.{match.group(2)}" if match else name.split(".")[0].split("_")[0]


def family_of(metadata: dict[str, str], prefixes: Iterable[str]) -> tuple[str, str]:
    for key in ("architecture", "ss_base_model_version", "modelspec.architecture"):
        if metadata.get(key):
            return metadata[key], f"metadata {key}"
    for family, marks in _FAMILY_BY_KEYS:
        if any(mark in prefix for prefix in prefixes for mark in marks):
            return family, "guessed from the key names"
    return "unknown", "no metadata names it and the key names do not tell"


def inspect_lora(
    path: str, key_map: dict[str, Any] | None = None, convertible: Container[str] | None = None
) -> LoRAReport:
    """The report of LoRA file `path` (ComfyUI's or another trainer's names); with `key_map` (a model's
    {LoRA key prefix: weight key}, see model_key_map / weights_file_key_map) also the keys it would not
    load, and with `convertible` (layer_table of that model) how many of those `lora convert` places."""
    path = peft_weights_file(path)
    lora = read_lora(path, other_trainers=True)
    scales = None  # a PEFT/diffusers file's LoraConfig, read for the first layer without an alpha
    blocks: dict[str, Block] = {}
    without_alpha = 0
    for prefix, group in lora.layers.items():
        block = blocks.setdefault(block_of(prefix), Block())
        block.layers += 1
        block.algorithms[layer_algorithm(group)] += 1
        rank, alpha = rank_and_alpha(group)
        if rank is not None and alpha is not None:
            if "alpha" not in group:
                without_alpha += 1
                scales = scales or peft_scales(path, lora.metadata)
                alpha = scales.alpha_of_layer(prefix, rank)
            block.ranks[rank] += 1
            block.alphas[alpha] += 1
    metadata: dict[str, dict[str, str]] = {}
    for key, value in sorted(lora.metadata.items()):
        writer = next((w for w, marks in _WRITERS if key.startswith(marks)), "other")
        metadata.setdefault(writer, {})[key] = value
    family, source = family_of(lora.metadata, lora.layers)
    report = LoRAReport(
        path,
        sum(len(g) for g in lora.layers.values()) + len(lora.other_keys),
        family,
        source,
        lora.algorithms(),
        blocks,
        metadata,
        lora.other_keys,
    )
    if scales is not None:
        report.alpha_source = f"{without_alpha} layers without one: {scales.source}"
    if key_map is not None:
        report.not_loaded = _not_loaded(path, key_map)
        if convertible is not None:
            report.convertible = sum(1 for key in report.not_loaded if (split_key(key) or ("",))[0] in convertible)
    return report


def _not_loaded(path: str, key_map: Container[str]) -> list[str]:
    """The keys of `path` stock ComfyUI would leave out for a model of `key_map` (text encoders aside)."""
    import safetensors

    with safetensors.safe_open(path, "pt") as f:
        keys = list(f.keys())
    out = []
    for key in keys:
        split = split_key(key)
        if split is not None and split[0].startswith(_TEXT_ENCODER):
            continue
        if split is None or split[0] not in key_map or split[1] == "lora_magnitude_vector":
            out.append(key)
    return sorted(out)


def model_key_map(patcher: Any) -> dict[str, Any]:
    """{LoRA key prefix: weight key} ComfyUI's LoraLoader uses for this MODEL."""
    import comfy.lora

    return comfy.lora.model_lora_keys_unet(patcher.model, {})


def weights_file_key_map(path: str) -> dict[str, str]:
    """The key map ComfyUI makes for any model from a diffusion model's weight names, read from a
    .safetensors file's header alone (no weights loaded): the generic `diffusion_model.<name>` and
    kohya's `lora_unet_<name>` forms. A family's other namings (diffusers') are not included."""
    import safetensors

    from .lora_layers import check_input

    check_input(path)
    with safetensors.safe_open(path, "pt") as f:
        names = list(f.keys())
    key_map = {}
    for name in diffusion_model_names(names):
        if name.endswith(".weight"):
            native = name[: -len(".weight")]
            key_map[f"diffusion_model.{native}"] = name
            key_map["lora_unet_" + native.replace(".", "_")] = name
        else:
            key_map[f"diffusion_model.{name}"] = name
    return key_map


def diffusion_model_names(names: Collection[str]) -> dict[str, str]:
    """{name inside the diffusion model: key in the file} of a diffusion model's file (bare names as
    ComfyUI saves a diffusion model) or a checkpoint's (`model.diffusion_model.` keys)."""
    for prefix in ("model.diffusion_model.", "diffusion_model."):
        inside = {n[len(prefix) :]: n for n in names if n.startswith(prefix)}
        if inside:
            return inside
    return {n: n for n in names}


def report_json(report: LoRAReport) -> str:
    return json.dumps(
        {
            **report.__dict__,
            "blocks": {
                k: {
                    "layers": b.layers,
                    "ranks": dict(b.ranks),
                    "alphas": dict(b.alphas),
                    "algorithms": dict(b.algorithms),
                }
                for k, b in report.blocks.items()
            },
        },
        indent=1,
    )
