"""A config file (EriDiffusion's sections, or ai-toolkit's format) checked and completed: every key
known, every value within its node input's bounds, every default filled, every relative path
taken from the file that wrote it."""

import os
from dataclasses import dataclass, fields

import yaml

from ..errors import EriDiffusionError
from ..settings import hinted_end, nearest_hint, parsed_value
from . import ai_toolkit
from .config_file import read_config
from .models import TINY_MODELS, ModelSource
from .schema import DECLARED, NODE_SECTIONS, OPTIONAL_SECTIONS, SECTIONS, section_settings

TOP_LEVEL = SECTIONS + ("output",)


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs, as the nodes' inputs: `dataset` holds LoadDataset's inputs, `train`
    LoRATrainer's, ...; `objective` and `sample` are None when their node is not connected."""

    path: str  # the config file
    model: ModelSource
    dataset: dict
    cache: dict
    train: dict
    objective: dict | None
    sample: dict | None
    save: dict
    logging: dict
    validation_dataset: dict | None = None  # LoadDataset's inputs for CacheLatents' validation_dataset
    regularization_dataset: dict | None = None  # ... and for its regularization_dataset (class images)
    output: str = ""  # ComfyUI's output folder for the run ("": the command line's)
    unsupported: tuple = ()  # "key (why)" of settings read but not honoured
    schema: str = "eridiffusion"  # or "ai-toolkit": the format the file was written in

    def as_dict(self):
        """The complete config in EriDiffusion's own sections (what --print-config prints)."""
        model = {f.name: getattr(self.model, f.name) for f in fields(self.model)}
        model["text_encoders"] = list(model["text_encoders"])
        out = {"model": model}
        out.update({section: getattr(self, section) for section in NODE_SECTIONS})
        out["logging"] = self.logging
        if self.output:
            out["output"] = self.output
        return out


class _Dumper(yaml.SafeDumper):
    pass


# multi-line text (prompts) as a YAML block, one prompt a line
_Dumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None),
)


def config_yaml(config: RunConfig) -> str:
    """`config` as YAML in EriDiffusion's sections: a file that runs the same."""
    return yaml.dump(config.as_dict(), Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def load_run_config(path: str) -> RunConfig:
    """The RunConfig of the config file at `path` (with its _base_ files)."""
    text = read_config(path)
    if ai_toolkit.is_ai_toolkit(text.values):
        translation = ai_toolkit.translate(text)
        return _complete(
            text.path,
            translation.sections,
            translation.labels,
            translation.output,
            tuple(translation.unsupported),
            "ai-toolkit",
        )
    for key in text.values:
        if key not in TOP_LEVEL:
            raise EriDiffusionError(
                f"{text.origin((key,))}: unknown section '{key}'"
                f"{nearest_hint(str(key), TOP_LEVEL)} (sections: {', '.join(TOP_LEVEL)})."
            )
    labels = {}
    for section, values in text.values.items():
        if isinstance(values, dict):
            labels.update({(section, key): (f"{section}.{key}", text.origin((section, key))) for key in values})
        else:
            labels[(section, None)] = (section, text.origin((section,)))
    output = (text.values["output"], text.origin(("output",))) if "output" in text.values else ()
    return _complete(
        text.path, {k: v for k, v in text.values.items() if k != "output"}, labels, output, (), "eridiffusion"
    )


def _absolute(path, origin_file):
    path = os.path.expanduser(path)
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(os.path.dirname(origin_file), path))


def _complete(path, raw, labels, output, unsupported, schema):
    resolved = {}
    for section in SECTIONS:
        given = raw.get(section)
        where, origin = labels.get((section, None), (section, path))
        if given is None and section in OPTIONAL_SECTIONS:
            resolved[section] = None
            continue
        if section == "model" and isinstance(given, str):
            given = {"checkpoint": given}
            labels = {**labels, ("model", "checkpoint"): (where, origin)}
        if not isinstance(given, (dict, type(None))):
            raise EriDiffusionError(f"{origin}: {where} must be a mapping of keys (got {given!r}).")
        if section == "train" and given and "method" in given:
            given = _with_method(given, *labels.get(("train", "method"), ("train.method", path)))
        resolved[section] = _complete_section(section, given or {}, labels, path)
        if section in DECLARED and section != "model":
            try:  # the declaration's checks of the values together (sample.prompts not empty ...)
                DECLARED[section](**resolved[section])
            except EriDiffusionError as error:
                raise EriDiffusionError(f"{origin}: {where}: {error}") from None
    _check_training(resolved, labels, path)
    for section in ("dataset", "validation_dataset", "regularization_dataset"):
        if (section == "dataset" or raw.get(section) is not None) and "folder" not in (raw.get(section) or {}):
            raise EriDiffusionError(
                f"{path}: {section}.folder is missing: give the folder of "
                f"{'training' if section == 'dataset' else section.split('_')[0]} images "
                "(relative to the config file, or absolute)."
            )
    if output:
        folder, origin = output
        if not isinstance(folder, str) or not folder:
            raise EriDiffusionError(f"{origin}: output must be a folder path (got {folder!r}).")
        output = _absolute(folder, origin)
    try:
        model = ModelSource(**resolved.pop("model"))
    except EriDiffusionError as error:
        raise EriDiffusionError(f"{path}: {error}") from None
    return RunConfig(path=path, model=model, output=output or "", unsupported=unsupported, schema=schema, **resolved)


# The design documents' `train.method`: what it asks of LoRATrainer's algorithm (None: an adapter, any algorithm).
METHODS = {"lora": None, "full_finetune": "full"}


def _with_method(given, where, origin):
    """The `train` section `given` with its `method` (`where`, set in file `origin`) as the algorithm it means."""
    from ..training.adapters.attach import FULL

    given = dict(given)
    method, algorithm = given.pop("method"), given.get("algorithm")
    if method not in METHODS:
        raise EriDiffusionError(
            f"{origin}: {where} '{method}' unknown; choose one of {', '.join(METHODS)}"
            f"{hinted_end(str(method), METHODS)}"
        )
    wanted = METHODS[method]
    if (wanted == FULL and algorithm not in (None, FULL)) or (wanted is None and algorithm == FULL):
        raise EriDiffusionError(
            f"{origin}: {where} {method} and train.algorithm {algorithm} ask for different runs: "
            f"{'full_finetune trains the weights (algorithm full)' if wanted else 'lora trains an adapter'}; "
            "keep one of the two keys."
        )
    if wanted is not None:
        given["algorithm"] = wanted
    return given


def _check_training(resolved, labels, path):
    """The TrainConfig LoRATrainer builds from the `train` section (and TrainingObjective's, when
    connected): the rules that tie settings together (a learning rate the optimizer takes, ...) are
    checked when the config is read, as the node and `train` check them."""
    from ..training.run.config import train_config_from

    try:
        train_config_from(resolved["train"], [resolved["objective"]] if resolved["objective"] is not None else [])
    except EriDiffusionError as error:
        raise EriDiffusionError(f"{labels.get(('train', None), ('train', path))[1]}: {error}") from None


def _complete_section(section, given, labels, path):
    settings = section_settings(section)
    values = {}
    for key, value in given.items():
        where, origin = labels.get((section, key), (f"{section}.{key}", path))
        if key not in settings:
            raise EriDiffusionError(
                f"{origin}: unknown key {where}{nearest_hint(str(key), settings)} "
                f"({section} takes {', '.join(settings)})."
            )
        value = parsed_value(settings[key], value, f"{origin}: {where}")
        if settings[key].info.path and value and not (section == "model" and value in TINY_MODELS):
            value = tuple(_absolute(v, origin) for v in value) if isinstance(value, tuple) else _absolute(value, origin)
        values[key] = value
    return {name: values.get(name, setting.default) for name, setting in settings.items()}
