"""Where an adapter learns: include/exclude regular expressions on layer names on top of the target
presets, and per-block learning-rate multipliers (`block_lr`, e.g. "input:0.5,middle:1,output:1"
for a UNet, "double:1,single:0.5" for Flux, "blocks.0-9:0.5" for a DiT).

A block is an entry of one of the diffusion model's top-level module lists (input_blocks.4,
double_blocks.12, blocks.3, …; a UNet's middle_block counts as one). A block_lr key names such a
list, by its name or its name less `_blocks`/`_block`/`_layers`, optionally with an index or an index
range."""

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ...errors import EriDiffusionError

PREFIX = "diffusion_model."
SUFFIXES = ("_blocks", "_block", "_layers")  # a key may leave these off a block list's name
_KEY = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\.(?P<first>\d+)(?:-(?P<last>\d+)?)?)?$")


def example_names(names, count=4):
    """A few of `names`, spread over them, for error messages."""
    names = sorted(names)
    if not names:
        return "(none)"
    step = max(1, len(names) // count)
    return ", ".join(names[::step][:count])


def select_layers(layers, include, exclude):
    """The (name, module) of `layers` whose name matches `include` and not `exclude` (regular
    expressions searched in the name; empty: no condition)."""
    names = [name for name, _ in layers]
    chosen = layers
    if include:  # (AdapterSpec's settings check has compiled both)
        wanted = re.compile(include)
        chosen = [(name, module) for name, module in chosen if wanted.search(name)]
    if exclude:
        unwanted = re.compile(exclude)
        chosen = [(name, module) for name, module in chosen if not unwanted.search(name)]
    if not chosen:
        raise EriDiffusionError(
            f"include {include!r} / exclude {exclude!r} leave none of the {len(layers)} targeted layers; "
            f"their names look like {example_names(names)}."
        )
    return chosen


@dataclass(frozen=True)
class BlockRate:
    """One entry of block_lr: the block list `name`, an index range (None: all) and the multiplier."""

    key: str
    name: str
    first: int | None
    last: int | None
    multiplier: float

    def matches(self, group, index):
        if group not in (self.name, *(self.name + suffix for suffix in SUFFIXES)):
            return False
        if self.first is None:
            return True
        return index is not None and self.first <= index and (self.last is None or index <= self.last)


def parse_block_lr(text):
    """[BlockRate] of a block_lr setting ("name[.i[-j]]:multiplier, ..."); an error naming the bad entry."""
    rates = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        key, _, value = entry.partition(":")
        match = _KEY.match(key.strip())
        try:
            multiplier = float(value)
        except ValueError:
            multiplier = -1.0
        if match is None or not 0 <= multiplier <= 100:
            raise EriDiffusionError(
                f"block_lr entry {entry!r} is not block:multiplier; write e.g. 'input:0.5,middle:1,output:1' "
                "(UNets), 'double:1,single:0.5' (Flux) or 'blocks.0-9:0.5' (a block list with an index range), "
                "multipliers 0 to 100."
            )
        first = int(match["first"]) if match["first"] is not None else None
        last = first if match["first"] is not None and "-" not in key else None
        if match["last"] is not None:
            last = int(match["last"])
        rates.append(BlockRate(key.strip(), match["name"], first, last, multiplier))
    return rates


def block_of(layer_name: str) -> tuple[str, int | None] | None:
    """(block list name, index or None) of a diffusion-model layer name, or None outside the blocks."""
    parts = layer_name[len(PREFIX) :].split(".") if layer_name.startswith(PREFIX) else layer_name.split(".")
    if len(parts) < 2:
        return None
    index = int(parts[1]) if parts[1].isdigit() else None
    if index is None and not parts[0].endswith("_block"):
        return None  # not a list of blocks (an embedder, the final layer)
    return parts[0], index


def block_lists(layer_names: Iterable[str]) -> dict[str, tuple[int, int] | None]:
    """{block list name: (lowest index, highest index) or None} of the blocks holding `layer_names`."""
    found: dict[str, tuple[int, int] | None] = {}
    for name in layer_names:
        block = block_of(name)
        if block is None:
            continue
        group, index = block
        if index is None:
            found.setdefault(group, None)
        else:
            low, high = found.get(group) or (index, index)
            found[group] = (min(low, index), max(high, index))
    return found


def describe_blocks(layer_names):
    lists = block_lists(layer_names)

    def listed(group, indices):
        if indices is None:
            return group
        return f"{group}.{indices[0]}" if indices[0] == indices[1] else f"{group}.{indices[0]}-{indices[1]}"

    return ", ".join(listed(g, r) for g, r in sorted(lists.items())) or "(none)"


def block_multipliers(layer_names, block_lr):
    """{layer name: learning-rate multiplier} from a block_lr setting (later entries win where they
    overlap; layers of no entry: 1). An entry that matches no adapted layer is an error listing the
    model's blocks."""
    rates = parse_block_lr(block_lr)
    multipliers = dict.fromkeys(layer_names, 1.0)
    for rate in rates:
        hit = False
        for name in layer_names:
            block = block_of(name)
            if block is not None and rate.matches(*block):
                multipliers[name], hit = rate.multiplier, True
        if not hit:
            raise EriDiffusionError(
                f"block_lr entry '{rate.key}' matches no adapted layer; this model's adapted blocks are "
                f"{describe_blocks(layer_names)} (a key is a block list's name, or its name less _blocks, _block "
                "or _layers, with an optional index or range: input:0.5, double.0-9:0.5)."
            )
    return multipliers
