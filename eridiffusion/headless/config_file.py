"""Reading a config file: YAML, with the files its `_base_` names merged in first (depth-first, a
later file wins), and which file set each value, so errors and relative paths refer to that file.
What YAML allows but a config never means is refused by name: a key written twice, an alias that
contains itself or expands past any real config's size, a file that is not UTF-8 text or is larger
than a config could be."""

import os
import re
from dataclasses import dataclass

import yaml

from ..errors import EriDiffusionError

BASE_KEY = "_base_"
MAX_FILE_BYTES = 1 << 20  # a config is a few KiB; a MiB is room for long prompt lists
MAX_VALUES = 100_000  # values after aliases expand (an alias bomb would be billions)
MAX_DEPTH = 32  # nesting of mappings and lists


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads `1e-4` (no dot) as text; configs in the wild write learning rates that way.
    A key written twice in one mapping is an error (YAML would keep the last and drop the first)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"the key '{key}' is written twice in one mapping (line {seen[key] + 1} and line "
                    f"{key_node.start_mark.line + 1}); YAML would keep the second and drop the first: keep one",
                    key_node.start_mark,
                )
            if isinstance(key, (str, int, float, bool)):
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                  |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                  |\.[0-9_]+(?:[eE][-+][0-9]+)?
                  |[-+]?\.(?:inf|Inf|INF)
                  |\.(?:nan|NaN|NAN))$""",
        re.VERBOSE,
    ),
    list("-+0123456789."),
)


@dataclass(frozen=True)
class ConfigText:
    """A config file with its bases merged in. `origins` maps a key path (a tuple of keys and list
    indices) to the file that set it; a path not listed was set together with its parent."""

    path: str
    values: dict
    origins: dict

    def origin(self, key_path):
        for end in range(len(key_path), -1, -1):
            if tuple(key_path[:end]) in self.origins:
                return self.origins[tuple(key_path[:end])]
        return self.path


def read_config(path):
    """The merged contents of the config file at `path`."""
    path = os.path.abspath(path)
    values, origins = _read(path, ())
    return ConfigText(path, values, origins)


def _yaml_problem(error):
    """A YAML parser's error as one line: `:<line>:<column>: is not valid YAML: <problem>` (YAML's
    own fix for the commonest one, a tab in the indentation, added)."""
    mark, problem = getattr(error, "problem_mark", None), getattr(error, "problem", None)
    if mark is None or not problem:
        return f" is not valid YAML: {' '.join(str(error).split())}"
    hint = "; indent with spaces, not tabs" if "'\\t'" in problem else ""
    return f":{mark.line + 1}:{mark.column + 1}: is not valid YAML: {problem}{hint}"


def _load_yaml(path, included_by):
    where = f" (named in {included_by}'s {BASE_KEY})" if included_by else ""
    if os.path.isdir(path):
        raise EriDiffusionError(f"config file {path}{where} is a folder; give the .yaml file inside it.")
    if os.path.exists(path) and not os.path.isfile(path):
        raise EriDiffusionError(
            f"config file {path}{where} is not a regular file (a device or pipe); give a .yaml file."
        )
    if not os.path.isfile(path):
        raise EriDiffusionError(f"config file {path}{where} does not exist.")
    if os.path.getsize(path) > MAX_FILE_BYTES:
        raise EriDiffusionError(
            f"config file {path}{where} is {os.path.getsize(path)} bytes, more than a config's "
            f"{MAX_FILE_BYTES}; is it the right file?"
        )
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=_Loader)
    except UnicodeDecodeError as error:
        raise EriDiffusionError(
            f"config file {path}{where} is not UTF-8 text (byte {error.start}); save it as UTF-8."
        ) from None
    except yaml.YAMLError as error:
        raise EriDiffusionError(f"{path}{_yaml_problem(error)}") from None
    except RecursionError:
        raise EriDiffusionError(f"{path} nests deeper than a config can; flatten it.") from None
    _check_size(data, path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise EriDiffusionError(
            f"{path} must hold a mapping of sections (model:, dataset:, train:, ...), not a {type(data).__name__}."
        )
    return data


def _check_size(data, path):
    """Refuse what only aliases can make: a value that contains itself, more than MAX_VALUES values
    (or deeper than MAX_DEPTH) once every alias is expanded (PyYAML shares an alias's value; walking
    it would take as long as the expansion, for an alias bomb billions of steps)."""
    count = 0
    stack = [(data, 0, ())]
    while stack:
        value, depth, ancestors = stack.pop()
        count += 1
        if count > MAX_VALUES or depth > MAX_DEPTH:
            what = f"more than {MAX_VALUES} values" if count > MAX_VALUES else f"deeper than {MAX_DEPTH} levels"
            raise EriDiffusionError(
                f"{path} holds {what} once its aliases (*name) are expanded; a config needs far fewer: "
                "write the values out or use fewer aliases."
            )
        if isinstance(value, (dict, list)):
            if id(value) in ancestors:
                raise EriDiffusionError(f"{path} has an alias (*name) inside the value it names; remove it.")
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1, ancestors + (id(value),)) for child in children)


def _read(path, chain):
    if path in chain:
        cycle = " -> ".join(os.path.basename(p) for p in chain + (path,))
        raise EriDiffusionError(f"{BASE_KEY} files include each other in a circle: {cycle}.")
    data = _load_yaml(path, chain[-1] if chain else None)
    bases = data.pop(BASE_KEY, [])
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list) or not all(isinstance(b, str) for b in bases):
        raise EriDiffusionError(f"{path}: {BASE_KEY} must be a file path or a list of them (got {bases!r}).")
    values, origins = {}, {}
    for base in bases:
        base_path = os.path.normpath(os.path.join(os.path.dirname(path), os.path.expanduser(base)))
        _merge(values, origins, *_read(base_path, chain + (path,)), ())
    _merge(values, origins, data, _origins_of(data, path, ()), ())
    return values, origins


def _origins_of(value, path, key_path):
    origins = {key_path: path}
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        origins.update(_origins_of(child, path, key_path + (key,)))
    return origins


def _merge(values, origins, override, override_origins, key_path):
    """Mappings merge key by key; anything else (lists too) replaces what the bases said."""
    for key, value in override.items():
        here = key_path + (key,)
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            _merge(values[key], origins, value, override_origins, here)
            continue
        values[key] = value
        for stale in [p for p in origins if p[: len(here)] == here]:
            del origins[stale]
        origins.update({p: f for p, f in override_origins.items() if p[: len(here)] == here})
