"""One definition per training setting: a dataclass field made with `setting(...)` holds its name,
type, default, bounds, choices and help text. The nodes build their inputs from it, the headless
config reads its keys and defaults from it, and `check_settings` validates a value against it."""

import dataclasses
import typing
from dataclasses import dataclass, field

from .errors import EriDiffusionError


@dataclass(frozen=True)
class SettingInfo:
    help: str
    minimum: float = None
    maximum: float = None
    step: float = None
    choices: tuple = None
    multiline: bool = False


def setting(default, help, **info):
    """A dataclass field that is a user-facing setting (see SettingInfo for `info`)."""
    return field(default=default, metadata={"setting": SettingInfo(help, **info)})


@dataclass(frozen=True)
class Setting:
    name: str
    type: type  # bool, int, float or str
    default: object
    info: SettingInfo


def settings_of(cls):
    """{name: Setting} of a settings dataclass (class or instance), in field order."""
    hints = typing.get_type_hints(cls if isinstance(cls, type) else type(cls))
    return {
        f.name: Setting(f.name, hints[f.name], f.default, f.metadata["setting"])
        for f in dataclasses.fields(cls)
        if "setting" in f.metadata
    }


def check_settings(obj, owner):
    """Raise EriDiffusionError naming the first setting of frozen dataclass `obj` outside its type,
    bounds or choices; `owner` names where it is set (a node, a config section). A whole number
    given for a float setting is stored as a float (16 and 16.0 are one setting)."""
    for name, s in settings_of(obj).items():
        value = getattr(obj, name)
        if s.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
            object.__setattr__(obj, name, value)
        if not isinstance(value, s.type) or (s.type is int and isinstance(value, bool)):
            raise EriDiffusionError(f"{owner}: {name} must be {s.type.__name__}, got {value!r}.")
        if s.info.choices is not None and value not in s.info.choices:
            raise EriDiffusionError(
                f"{owner}: {name} '{value}' unknown; choose one of {', '.join(map(str, s.info.choices))}."
            )
        low, high = s.info.minimum, s.info.maximum
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = (
                f"at least {low:g}"
                if high is None
                else (f"at most {high:g}" if low is None else f"between {low:g} and {high:g}")
            )
            raise EriDiffusionError(f"{owner}: {name} must be {bounds} (got {value!r}). {s.info.help}")
