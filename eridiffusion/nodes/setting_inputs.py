"""Node inputs made from the settings dataclasses (eridiffusion/settings.py): a widget per setting
with its default, bounds, choices and help text as the tooltip. Nodes hand settings on to
LoRATrainer as SettingValues."""

from dataclasses import dataclass
from typing import Any

from comfy_api.latest import io

from ..settings import Setting


def input_for(s: Setting):
    """The io input of Setting `s`."""
    info = s.info
    common: dict[str, Any] = {"default": s.default, "tooltip": info.help}
    if info.optional:
        common["optional"] = True
    choices = info.options()
    if choices is not None:
        return io.Combo.Input(s.name, options=list(choices), **common)
    if s.type is bool:
        return io.Boolean.Input(s.name, **common)
    step = info.step or info.multiple
    bounds = {k: v for k, v in (("min", info.minimum), ("max", info.maximum), ("step", step)) if v is not None}
    if s.type is int:
        extra = {"control_after_generate": False} if info.seed else {}
        return io.Int.Input(s.name, **bounds, **extra, **common)
    if s.type is float:
        return io.Float.Input(s.name, **bounds, **common)
    return io.String.Input(s.name, multiline=info.multiline, **common)


def inputs_for(settings: dict[str, Setting], group: str | None = None) -> list:
    """Inputs for `settings` ({name: Setting}, in their order), those of `group` alone when given ("": those
    of no group, a node's own where options nodes hold the others)."""
    return [input_for(s) for s in settings.values() if group is None or s.info.group == group]


@dataclass(frozen=True)
class SettingValues:
    """Settings a node hands to LoRATrainer: {setting name: value}."""

    values: dict
