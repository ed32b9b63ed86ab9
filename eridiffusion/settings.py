"""One definition per user-facing setting: a dataclass field made with `setting(...)` holds its name,
type, default, bounds, choices, help text and the node that shows it. Every node's inputs, the
option groups and the command line's config sections are derived from these declarations, and
`check_value` is the one place a value is checked against them."""

import dataclasses
import difflib
import math
import re
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .errors import EriDiffusionError

# The types a setting may have: what a node widget or a config value can hold (a tuple: a list of
# file paths).
SETTING_TYPES = (bool, int, float, str, tuple)


@dataclass(frozen=True)
class SettingInfo:
    """What a setting is besides its name, type and default."""

    help: str
    minimum: float | None = None
    maximum: float | None = None
    step: float | None = None  # the widget's increment
    multiple: int | None = None  # a whole number must be a multiple of this (the widget steps by it)
    # the allowed values; a function where the host decides them (its samplers, its loaders' dtypes),
    # called when a value other than the default is checked (the default must be one of them)
    choices: tuple | Callable[[], tuple] | None = None
    multiline: bool = False
    group: str = ""  # the node showing it, where one dataclass feeds several (the trainer's option groups)
    optional: bool = False  # added to its node after it shipped: workflows saved before it still validate
    path: bool = False  # a file or folder: relative in a config file means relative to that file
    seed: bool = False  # a random seed: its widget keeps the value (no "control after generate")
    regex: bool = False  # text that must be a regular expression (checked with the rest, before any loading)

    def options(self) -> tuple | None:
        """The allowed values, or None for any value of the type."""
        return self.choices() if callable(self.choices) else self.choices


def setting(default: Any, help: str, **info: Any) -> Any:
    """A dataclass field that is a user-facing setting (see SettingInfo for `info`)."""
    return field(default=default, metadata={"setting": SettingInfo(help, **info)})


@dataclass(frozen=True)
class Setting:
    name: str
    type: type  # one of SETTING_TYPES
    default: Any
    info: SettingInfo


def settings_of(cls: Any) -> dict[str, Setting]:
    """{name: Setting} of a settings dataclass (class or instance), in field order; a field holding
    another settings dataclass contributes that one's settings in its place."""
    cls = cls if isinstance(cls, type) else type(cls)
    hints = typing.get_type_hints(cls)
    found = {}
    for f in dataclasses.fields(cls):
        if "setting" in f.metadata:
            kind = typing.get_origin(hints[f.name]) or hints[f.name]
            found[f.name] = Setting(f.name, kind, f.default, f.metadata["setting"])
        elif dataclasses.is_dataclass(hints[f.name]):
            found.update(settings_of(hints[f.name]))
    return found


def nearest_hint(word: str, known: Iterable[object]) -> str:
    """'; did you mean X?' for the known word closest to `word`, or '' when none is close."""
    close = difflib.get_close_matches(word, [str(k) for k in known], n=1, cutoff=0.5)
    return f"; did you mean {close[0]}?" if close else ""


def hinted_end(word: str, known: Iterable[object]) -> str:
    """The end of a sentence that lists `known`: nearest_hint's question, or a full stop."""
    return nearest_hint(word, known) or "."


def _shown(value, quoted=True, limit=60):
    """`value` for a message: its repr (or str), cut to `limit` characters."""
    text = repr(value) if quoted else str(value)
    return text if len(text) <= limit else f"{text[: limit - 20]}…({len(text)} characters)"


def _bounds(low, high):
    if high is None:
        return f"at least {low:g}"
    return f"at most {high:g}" if low is None else f"between {low:g} and {high:g}"


def check_value(s: Setting, value: Any, where: str) -> Any:
    """`value` as setting `s` holds it, or an EriDiffusionError naming `where` (the setting on a
    node, "LoadDataset: repeats", or a config file's key, "cfg.yaml: dataset.repeats"), the value
    and the fix. A whole number for a float setting becomes a float (16 and 16.0 are one setting);
    NaN and infinities are refused."""
    if s.type is float and isinstance(value, int) and not isinstance(value, bool):
        try:
            value = float(value)
        except OverflowError:  # a whole number of hundreds of digits
            raise EriDiffusionError(f"{where} must be a number a float can hold, got {_shown(value)}.") from None
    wrong_type = not isinstance(value, s.type) or (s.type is int and isinstance(value, bool))
    if s.type is tuple and not wrong_type:
        wrong_type = not all(isinstance(v, str) and v for v in value)
    if wrong_type:
        kind = {bool: "true or false", int: "a whole number", float: "a number", str: "text"}.get(
            s.type, "a list of file paths"
        )
        raise EriDiffusionError(f"{where} must be {kind}, got {_shown(value)}.")
    if s.type is float and not math.isfinite(value):
        raise EriDiffusionError(f"{where} must be a finite number, got {value!r}.")
    # A host's choices (a function) are asked for only for a value other than the default, which is one
    # of them: reading a config that keeps the default sampler does not import ComfyUI's sampling code.
    asked = not callable(s.info.choices) or value != s.default
    choices = s.info.options() if asked else None
    if choices is not None and value not in choices:
        raise EriDiffusionError(
            f"{where} '{_shown(value, quoted=False)}' unknown; choose one of {', '.join(map(str, choices))}"
            f"{hinted_end(str(value), choices)}"
        )
    if s.info.regex and value:
        try:
            re.compile(value)
        except re.error as error:
            raise EriDiffusionError(
                f"{where} {_shown(value)} is not a regular expression ({error}): write a character it treats "
                f"as special (. ( [ * + ? | \\) with a backslash before it, e.g. '\\.' for a dot. {s.info.help}"
            ) from None
    low, high = s.info.minimum, s.info.maximum
    if (low is not None and value < low) or (high is not None and value > high):
        raise EriDiffusionError(f"{where} must be {_bounds(low, high)} (got {_shown(value)}). {s.info.help}")
    multiple = s.info.multiple
    if multiple and value % multiple:
        below, above = value - value % multiple, value - value % multiple + multiple
        inside = [v for v in (below, above) if (low is None or v >= low) and (high is None or v <= high)]
        nearest = " or ".join(map(str, inside))
        raise EriDiffusionError(f"{where} must be a multiple of {multiple} (got {value}): use {nearest}. {s.info.help}")
    return value


def check_declared(cls: Any, owner: str, **values: Any) -> dict[str, Any]:
    """`values` ({setting name: value}) checked against the settings of dataclass `cls` as its own
    fields are (check_value, "owner: name"): where another object carries a setting's value, it is
    checked by the one declaration. Returns the values as the settings hold them."""
    declared = settings_of(cls)
    return {name: check_value(declared[name], value, f"{owner}: {name}") for name, value in values.items()}


def parsed_value(s: Setting, value: Any, where: str) -> Any:
    """A value read from a config file as setting `s` takes it: a list of prompts for multi-line
    text, one path for a list of paths, a whole float for an int; then check_value."""
    if s.info.multiline and isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        broken = next((k for k, v in enumerate(value) if "\n" in v.strip() or "\r" in v.strip()), None)
        if broken is not None:  # it would silently become two lines
            raise EriDiffusionError(f"{where}[{broken}] holds a line break; a list item is one line: split it in two.")
        value = "\n".join(value)
    if s.type is tuple and isinstance(value, (str, list)):
        value = (value,) if isinstance(value, str) else tuple(value)
    if s.type is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    return check_value(s, value, where)


def check_settings(obj: Any, owner: str) -> None:
    """Check every setting of frozen dataclass `obj` (check_value); `owner` names where it is set
    (a node, a config section)."""
    for name, s in settings_of(obj).items():
        if not hasattr(obj, name) or dataclasses.is_dataclass(getattr(obj, name)):
            continue  # (a nested settings dataclass checks its own)
        value = check_value(s, getattr(obj, name), f"{owner}: {name}")
        object.__setattr__(obj, name, value)


def values_of(obj: Any) -> dict[str, Any]:
    """{setting name: value} of a settings dataclass instance, nested ones flattened."""
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if "setting" in f.metadata:
            out[f.name] = value
        elif dataclasses.is_dataclass(value):
            out.update(values_of(value))
    return out
