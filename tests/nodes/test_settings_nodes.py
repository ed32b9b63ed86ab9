"""The training settings are defined once (the dataclasses of training/run/config.py) and every node
input that sets one is that definition: same name, default, bounds, choices and help text."""

import subprocess
import sys

import pytest
import torch

from devkit.headless import cli_env
from devkit.workflow import load_extension, trainer_setting_nodes
from eridiffusion.nodes.options_nodes import OPTIONS_NODES
from eridiffusion.training.run.config import TrainConfig, train_config_from, training_settings

WIDGET_KIND = {bool: "BOOLEAN", int: "INT", float: "FLOAT", str: "STRING"}


@pytest.fixture(scope="module")
def registered():
    return load_extension()


def widget_specs(node_class):
    definition = node_class.INPUT_TYPES()
    specs = {}
    for group in ("required", "optional"):
        for name, spec in definition.get(group, {}).items():
            kind = spec[0]
            if isinstance(kind, list) or kind in ("COMBO", "INT", "FLOAT", "STRING", "BOOLEAN"):
                specs[name] = spec
    return specs


def test_every_training_setting_is_one_widget_of_one_node_with_its_definition(registered):
    settings = training_settings()
    seen = {}
    for node_type in trainer_setting_nodes():
        for name, spec in widget_specs(registered[node_type]).items():
            assert name not in seen, f"{name} is on {seen.get(name)} and {node_type}"
            seen[name] = node_type
            s = settings[name]
            options = spec[1]
            if s.info.choices is not None:
                choices = spec[0] if isinstance(spec[0], list) else options["options"]
                assert list(choices) == list(s.info.choices), name
            else:
                assert spec[0] == WIDGET_KIND[s.type], name
            assert options["default"] == s.default, name
            assert options["tooltip"] == s.info.help, name
            assert options.get("min") == s.info.minimum and options.get("max") == s.info.maximum, name
    assert set(seen) == set(settings)


def test_the_trainer_shows_the_essentials_and_the_options_nodes_the_rest(registered):
    trainer = widget_specs(registered["EriDiffusion_LoRATrainer"])
    assert list(trainer) == [
        "steps",
        "learning_rate",
        "algorithm",
        "rank",
        "alpha",
        "batch_size",
        "seed",
        "dtype",
        "save_every",
        "run_name",
    ]
    assert [n.NODE_ID for n in OPTIONS_NODES] == [
        "EriDiffusion_AdapterOptions",
        "EriDiffusion_OptimizerOptions",
        "EriDiffusion_MemoryOptions",
        "EriDiffusion_CheckpointOptions",
        "EriDiffusion_ValidationOptions",
        "EriDiffusion_TrainingExtras",
    ]


def test_nodes_left_at_their_defaults_give_the_default_config(registered):
    defaults = {name: s.default for name, s in training_settings().items()}
    assert train_config_from(defaults) == TrainConfig()
    assert train_config_from({}) == TrainConfig()


def test_a_value_outside_a_setting_s_bounds_names_the_setting_and_its_range():
    from eridiffusion.errors import EriDiffusionError

    with pytest.raises(EriDiffusionError, match=r"rank must be between 1 and 1024 \(got 0\)"):
        train_config_from({"rank": 0})
    with pytest.raises(EriDiffusionError, match="lr_schedule 'linear' unknown; choose one of constant, cosine"):
        train_config_from({"lr_schedule": "linear"})
    assert train_config_from({"alpha": 8}).adapter.alpha == 8.0 and isinstance(
        train_config_from({"alpha": 8}).adapter.alpha, float
    )


def test_a_pattern_or_block_rates_that_do_not_parse_are_flagged_on_their_options_node_when_queued(
    registered, datasets_dir, comfy_dirs
):
    """ComfyUI asks AdapterOptions' validate_inputs before any node runs: nothing loads or trains."""
    import os

    from devkit.workflow import run_training

    for setting in ("include", "exclude"):
        with pytest.raises(RuntimeError) as rejected:
            run_training(os.path.join(datasets_dir, "dreambooth_dog"), f"bad_{setting}", trainer={setting: "attn2("})
        assert f"AdapterOptions: {setting} 'attn2(' is not a regular expression (missing )" in str(rejected.value)
        assert not os.path.exists(os.path.join(comfy_dirs["output"], f"bad_{setting}"))
    with pytest.raises(RuntimeError) as rejected:  # OptimizerOptions' per-block rates, the same way
        run_training(os.path.join(datasets_dir, "dreambooth_dog"), "bad_block_lr", trainer={"block_lr": "input=0.5"})
    assert "OptimizerOptions: block_lr entry 'input=0.5' is not block:multiplier" in str(rejected.value)


def test_registering_the_nodes_imports_no_test_support_module_and_warns_of_nothing():
    """A fresh interpreter loads EriDiffusion as ComfyUI does (comfy_entrypoint + the node list):
    nothing under tests/ or the tiny families of the test support is imported, nor the training
    libraries that only a run needs (LyCORIS imports bitsandbytes, which warns on a CPU machine)."""
    code = (
        "import asyncio, importlib.util, sys\n"
        "from eridiffusion.runtime import start_host_in_temp_dir\n"
        "start_host_in_temp_dir('eridiffusion-nodes-')\n"
        "spec = importlib.util.spec_from_file_location('EriDiffusion', '__init__.py',"
        " submodule_search_locations=['.'])\n"
        "module = importlib.util.module_from_spec(spec); sys.modules['EriDiffusion'] = module\n"
        "spec.loader.exec_module(module)\n"
        "extension = asyncio.run(module.comfy_entrypoint())\n"
        "nodes = asyncio.run(extension.get_node_list())\n"
        "print(len(nodes))\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    from devkit.paths import ROOT

    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    count, *modules = done.stdout.split()
    assert int(count) == 25  # the 19 training nodes (the 3 media options the last) and the 6 of the LoRA toolbox
    assert any(m.startswith("EriDiffusion.eridiffusion.nodes") for m in modules)
    support = [
        m
        for m in modules
        if m.startswith(("tests", "demo")) or ".tests." in m or "tiny_flux" in m or "tiny_stack" in m or "tiny_wan" in m
    ]
    assert support == []
    assert not [m for m in modules if m.split(".")[0] in ("lycoris", "bitsandbytes", "prodigyopt")]
    ours = [
        line
        for line in done.stderr.splitlines()
        if any(w in line.lower() for w in ("eridiffusion", "lycoris", "bitsandbytes"))
    ]
    assert ours == []


def test_device_offers_each_gpu_by_name_only_where_there_are_several_to_choose_from(registered):
    from eridiffusion.training.run.config import device_choices

    assert device_choices(0) == ("auto",)
    assert device_choices(1) == ("auto",)
    assert device_choices(3) == ("auto", "cuda:0", "cuda:1", "cuda:2")
    memory = widget_specs(registered["EriDiffusion_MemoryOptions"])
    assert list(memory) == [
        "gradient_checkpointing",
        "weights_vram_gib",
        "torch_compile",
        "cuda_graphs",
        "fp8_compute",
        "device",
        "vram_budget_gib",
        "blocks_to_swap",
        "base_quantization",
        "fused_backward",
        "fine_tune_dtype",
        "sharding",
    ]
    offered = memory["device"][1]["options"] if memory["device"][0] == "COMBO" else memory["device"][0]
    assert list(offered) == list(device_choices(torch.cuda.device_count()))
    assert memory["device"][1]["default"] == "auto"


@pytest.mark.skipif(torch.cuda.device_count() > 1, reason="this machine has a cuda:1")
def test_a_device_the_machine_lacks_is_refused_naming_the_choices():
    from eridiffusion.errors import EriDiffusionError

    with pytest.raises(EriDiffusionError, match="device 'cuda:1' unknown; choose one of auto"):
        train_config_from({"device": "cuda:1"})
