"""Node inputs made from the settings dataclasses (eridiffusion/training/settings.py): a widget per
setting with its default, bounds, choices and help text as the tooltip. Nodes hand settings on to
LoRATrainer as SettingValues."""

from dataclasses import dataclass

from comfy_api.latest import io

SEEDS = ("seed",)  # no "control after generate" widget: a training run's seed stays what the user set


# Settings added to a node after it shipped: optional inputs, so API prompts saved before they existed
# still validate (a missing one takes its default).
ADDED_LATER = ("include", "exclude", "block_lr", "timestep_min", "timestep_max")


def input_for(s):
    """The io input of Setting `s`."""
    info, common = s.info, {"default": s.default, "tooltip": s.info.help}
    if s.name in ADDED_LATER:
        common["optional"] = True
    if info.choices is not None:
        return io.Combo.Input(s.name, options=list(info.choices), **common)
    if s.type is bool:
        return io.Boolean.Input(s.name, **common)
    bounds = {k: v for k, v in (("min", info.minimum), ("max", info.maximum), ("step", info.step)) if v is not None}
    if s.type is int:
        extra = {"control_after_generate": False} if s.name in SEEDS else {}
        return io.Int.Input(s.name, **bounds, **extra, **common)
    if s.type is float:
        return io.Float.Input(s.name, **bounds, **common)
    return io.String.Input(s.name, multiline=info.multiline, **common)


def inputs_for(settings, names):
    """Inputs for `names` (in that order) of {name: Setting} `settings`."""
    return [input_for(settings[name]) for name in names]


@dataclass(frozen=True)
class SettingValues:
    """Settings a node hands to LoRATrainer: {setting name: value}."""

    values: dict
