"""Every setting has one bound, declared once with `setting(...)`: the node input shows it, the settings
object refuses a value just past it, and `eridiffusion train cfg.yaml --print-config` refuses that value
with the same message. Rules that tie settings together (a learning rate the optimizer takes, ...) are
refused by --print-config exactly as by --dry-run, and by the settings object the node builds."""

import ast
import importlib
import math
import os

import pytest
import yaml

from devkit.paths import ROOT
from devkit.workflow import load_extension, trainer_setting_nodes
from eridiffusion.errors import EriDiffusionError
from eridiffusion.headless import cli
from eridiffusion.headless.schema import SECTIONS, section_settings
from eridiffusion.lora_tools import settings as tool_settings
from eridiffusion.settings import settings_of
from eridiffusion.tiny_models import TinyDemoSettings
from eridiffusion.training.data.dataset_settings import DatasetSettings
from eridiffusion.training.data.training_data import CacheSettings
from eridiffusion.training.run.config import NESTED, TrainConfig, train_config_from, training_settings
from eridiffusion.training.samples.sampler_settings import SamplerSettings


def declared_classes():
    """Every dataclass of the product with a field made by `setting(...)`, found in the source (so a new
    one is checked without being listed here)."""
    found = []
    for directory, _, files in os.walk(os.path.join(ROOT, "eridiffusion")):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            module = os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".").removesuffix(".__init__")
            for node in tree.body:
                calls = [
                    n.value.func.id
                    for n in getattr(node, "body", [])
                    if isinstance(n, ast.AnnAssign) and isinstance(n.value, ast.Call) and hasattr(n.value.func, "id")
                ]
                if isinstance(node, ast.ClassDef) and "setting" in calls:
                    found.append(getattr(importlib.import_module(module), node.name))
    return found


def numeric(settings):
    """{name: Setting} of the settings that have a bound."""
    return {
        name: s
        for name, s in settings.items()
        if s.type in (int, float) and (s.info.minimum is not None or s.info.maximum is not None)
    }


def past(s):
    """[(value just past the setting's bound, the message tail `name must be ...`)]."""
    low, high = s.info.minimum, s.info.maximum
    bounds = f"between {low:g} and {high:g}" if low is not None and high is not None else None
    bounds = bounds or (f"at least {low:g}" if high is None else f"at most {high:g}")
    out = []
    for bound, direction in ((low, -math.inf), (high, math.inf)):
        if bound is not None:
            value = (int(bound) + (1 if direction > 0 else -1)) if s.type is int else math.nextafter(bound, direction)
            out.append((value, f"{s.name} must be {bounds} (got {value!r}). {s.info.help}"))
    return out


def build(cls, name, value):
    """The settings object of class `cls` with `name` set to `value` (the rest at their defaults), as its
    node builds it; a TrainConfig as LoRATrainer builds it from its flat inputs."""
    if cls is TrainConfig:
        return train_config_from({name: value}, [])
    return cls(**{name: value})


CLASSES = declared_classes()
# Node -> the settings class its widgets come from (the trainer's nodes: TrainConfig's flat settings).
NODE_SETTINGS = {
    **{node: TrainConfig for node in trainer_setting_nodes()},
    "EriDiffusion_LoadDataset": DatasetSettings,
    "EriDiffusion_CacheLatents": CacheSettings,
    "EriDiffusion_SampleDuringTraining": SamplerSettings,
    # the media options nodes show the rest of those nodes' settings (group "media")
    "EriDiffusion_DatasetMediaOptions": DatasetSettings,
    "EriDiffusion_CacheMediaOptions": CacheSettings,
    "EriDiffusion_SampleMediaOptions": SamplerSettings,
    "EriDiffusion_TinyDemoModel": TinyDemoSettings,
    "EriDiffusion_ResizeLoRA": tool_settings.ResizeSettings,
    "EriDiffusion_MergeLoRAs": tool_settings.MergeSettings,
    "EriDiffusion_ExtractLoRA": tool_settings.ExtractSettings,
}


def test_the_settings_classes_are_found_in_the_source():
    names = {cls.__name__ for cls in CLASSES}
    assert {"TrainConfig", "AdapterSpec", "ObjectiveSpec", "DatasetSettings", "CacheSettings"} <= names
    assert {"SamplerSettings", "SaveSettings", "ModelSource", "MergeSettings", "ExtractSettings"} <= names
    assert len(names) == len(CLASSES)


def test_every_numeric_node_input_has_its_settings_declared_bounds():
    registered = load_extension()
    shown = set()
    for node_id, cls in NODE_SETTINGS.items():
        declared = numeric(settings_of(cls))
        definition = registered[node_id].INPUT_TYPES()
        for group in ("required", "optional"):
            for name, (kind, options) in ((n, s[:2]) for n, s in definition.get(group, {}).items()):
                if kind not in ("INT", "FLOAT"):
                    continue
                info = declared[name].info
                assert (options.get("min"), options.get("max")) == (info.minimum, info.maximum), (node_id, name)
                assert options.get("step") == (info.step or info.multiple), (node_id, name)
                shown.add((cls, name))
    nodes = set(NODE_SETTINGS.values())
    assert shown == {(cls, name) for cls in nodes for name in numeric(settings_of(cls))}
    # the classes no node shows hold no bounded setting (config file sections, file and text inputs), but
    # TrainConfig's nested ones, whose settings the trainer's nodes show flat
    unshown = [cls for cls in CLASSES if cls not in nodes | set(NESTED.values())]
    assert unshown and all(not numeric(settings_of(cls)) for cls in unshown)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_a_value_just_past_a_bound_is_refused_by_the_settings_object_naming_the_bound(cls):
    checked = 0
    for name, s in numeric(settings_of(cls)).items():
        for value, tail in past(s):
            with pytest.raises(EriDiffusionError) as refused:
                build(cls, name, value)
            owner, _, message = str(refused.value).partition(": ")
            assert message == tail, owner
            checked += 1
    assert checked or not numeric(settings_of(cls))


@pytest.fixture
def train_cli(monkeypatch, capsys, tmp_path):
    """run(config text or mapping, *flags): `eridiffusion train cfg.yaml *flags` in this process (ComfyUI
    is already started for the tests): (status, stdout, stderr, the config's path)."""
    monkeypatch.setattr("eridiffusion.runtime.start_host", lambda folder: folder)

    def run(config, *flags):
        path = tmp_path / "cfg.yaml"
        path.write_text(config if isinstance(config, str) else yaml.safe_dump(config), encoding="utf-8")
        status = cli.main(["train", str(path), *flags])
        out = capsys.readouterr()
        return status, out.out, out.err, str(path)

    return run


def base_config():
    return {"model": "tiny-sdxl", "dataset": {"folder": "photos"}, "sample": None, "objective": None}


@pytest.mark.parametrize("section", SECTIONS)
def test_print_config_refuses_a_value_just_past_each_bound_with_the_settings_objects_message(section, train_cli):
    checked = 0
    for name, s in numeric(section_settings(section)).items():
        for value, tail in past(s):
            config = base_config()
            config[section] = {**(config.get(section) or {}), name: value}
            status, out, err, path = train_cli(config, "--print-config")
            assert (status, out, err) == (cli.EXIT_ERROR, "", f"eridiffusion: error: {path}: {section}.{tail}\n")
            checked += 1
    assert checked == 2 * len(numeric(section_settings(section)))


def test_a_resolution_off_the_bucket_step_is_refused_by_print_config_the_node_and_the_cache(train_cli):
    # (was: printed by --print-config, refused by --dry-run's buckets)
    tail = (
        "resolution must be a multiple of 64 (got 1000): use 960 or 1024. "
        + settings_of(CacheSettings)["resolution"].info.help
    )
    status, _, err, path = train_cli({**base_config(), "cache": {"resolution": 1000}}, "--print-config")
    assert (status, err) == (cli.EXIT_ERROR, f"eridiffusion: error: {path}: cache.{tail}\n")
    with pytest.raises(EriDiffusionError) as refused:
        CacheSettings(resolution=1000)
    assert str(refused.value) == f"CacheLatents: {tail}"
    options = load_extension()["EriDiffusion_CacheLatents"].INPUT_TYPES()["required"]["resolution"][1]
    assert (options["min"], options["step"]) == (64, 64)


CROSS_FIELD = {
    # (config sections, how the node builds the settings object)
    "learning_rate above AdamW's": (
        {"train": {"learning_rate": 5}},
        lambda: train_config_from({"learning_rate": 5.0}, []),
    ),
    "Prodigy with a second rate": (
        {"train": {"optimizer": "Prodigy", "learning_rate": 1.0, "text_encoder_lr": 0.5}},
        lambda: train_config_from({"optimizer": "Prodigy", "learning_rate": 1.0, "text_encoder_lr": 0.5}, []),
    ),
    "an empty timestep range": (
        {"objective": {"timestep_min": 0.6, "timestep_max": 0.6}},
        lambda: train_config_from({}, [{"timestep_min": 0.6, "timestep_max": 0.6}]),
    ),
    "streamed weights without checkpointing": (
        {"train": {"weights_vram_gib": 2.0, "gradient_checkpointing": False}},
        lambda: train_config_from({"weights_vram_gib": 2.0, "gradient_checkpointing": False}, []),
    ),
    "the trigger word as caption without one": (
        {"dataset": {"folder": "photos", "missing_caption": "use trigger word"}},
        lambda: DatasetSettings(missing_caption="use trigger word"),
    ),
}


@pytest.mark.parametrize("example", sorted(CROSS_FIELD))
def test_a_rule_between_settings_is_refused_by_print_config_exactly_as_by_dry_run_and_the_node(example, train_cli):
    sections, node = CROSS_FIELD[example]
    with pytest.raises(EriDiffusionError) as refused:
        node()
    where = "dataset: " if "dataset" in sections else ""
    printed = train_cli({**base_config(), **sections}, "--print-config")
    dry_run = train_cli({**base_config(), **sections}, "--dry-run")
    assert printed == dry_run
    assert printed[:3] == (cli.EXIT_ERROR, "", f"eridiffusion: error: {printed[3]}: {where}{refused.value}\n")


def test_learning_rate_five_is_refused_naming_the_optimizers_limit_and_prodigy_takes_it(train_cli):
    status, _, err, path = train_cli({**base_config(), "train": {"learning_rate": 5}}, "--print-config")
    assert (status, err) == (
        cli.EXIT_ERROR,
        f"eridiffusion: error: {path}: learning_rate 5 is above 1, the most AdamW takes (it steps by the rate "
        "itself; LoRA trains at about 1e-4); only Prodigy, whose rate multiplies its own step estimate, takes up "
        "to 10 (at 1.0 usually).\n",
    )
    status, out, err, _ = train_cli(
        {**base_config(), "train": {"learning_rate": 5, "optimizer": "Prodigy"}}, "--print-config"
    )
    assert (status, err) == (0, "") and yaml.safe_load(out)["train"]["learning_rate"] == 5.0
    assert training_settings()["learning_rate"].info.maximum == 10.0
