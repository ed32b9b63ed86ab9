"""Where the adapter learns: include/exclude patterns on layer names, per-block learning rates, and
the adapted layers listed in the saved file (tiny SD1.5, whose blocks are SDXL's)."""

import dataclasses
import json

import pytest
import safetensors
import torch

from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.adapters.layer_selection import block_multipliers, describe_blocks, parse_block_lr
from eridiffusion.training.run.build import TrainingRun
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import TrainingHooks, train

LEARNING_RATE = 1e-3


@pytest.fixture
def stack(quality_stack):
    model, _, _, data = quality_stack
    return model, dataclasses.replace(data, validation=None)


def config(include="", exclude="", block_lr="", targets="attention"):
    return TrainConfig(
        steps=1,
        learning_rate=LEARNING_RATE,
        dtype="fp32",
        gradient_checkpointing=False,
        block_lr=block_lr,
        adapter=AdapterSpec(rank=2, alpha=2.0, targets=targets, include=include, exclude=exclude),
        run_name="selected",
    )


def test_only_the_selected_layers_get_adapters_and_the_file_lists_them(stack, tmp_path):
    model, data = stack
    everything = TrainingRun(model, data, config(), str(tmp_path / "all"))
    everything.release()
    run = TrainingRun(model, data, config(include=r"attn2\.to_[kv]", exclude=r"output_blocks\.[0-5]\."), str(tmp_path))
    run.progress.eval_before = 0.0
    try:
        with torch.inference_mode(False):
            result = train(run, None, TrainingHooks())
    finally:
        run.release()
    chosen = run.trained.adapters.layer_names
    expected = [
        name
        for name in everything.trained.adapters.layer_names
        if ("attn2.to_k" in name or "attn2.to_v" in name) and not any(f"output_blocks.{i}." in name for i in range(6))
    ]
    assert chosen == expected and 0 < len(chosen) < len(everything.trained.adapters.layer_names) / 4
    with safetensors.safe_open(result.checkpoints[-1], "pt") as f:
        assert json.loads(f.metadata()["eridiffusion_modules"]) == chosen
        prefixes = {key.rsplit(".", 2)[0] for key in f.keys() if key.endswith("lora_down.weight")}
    assert prefixes == {run.trained.prefixes[f"{name}.weight"] for name in chosen}


def test_block_learning_rates_become_the_optimizer_s_parameter_groups(stack, tmp_path):
    model, data = stack
    run = TrainingRun(model, data, config(block_lr="input:0.5, middle:2, output.3-5:0"), str(tmp_path))
    run.release()
    lrs = {}
    for group in run.optimizer.param_groups:
        for parameter in group["params"]:
            lrs[id(parameter)] = group["lr"]

    def rate(name):
        if "input_blocks" in name:
            return 0.5 * LEARNING_RATE
        if "middle_block" in name:
            return 2 * LEARNING_RATE
        if any(f"output_blocks.{i}." in name for i in (3, 4, 5)):
            return 0.0
        return LEARNING_RATE

    seen = set()
    for name, adapter in run.trained.adapters.items():
        for parameter in adapter.parameters():
            assert lrs[id(parameter)] == pytest.approx(rate(name)), name
            seen.add(rate(name))
    assert seen == {0.5 * LEARNING_RATE, 2 * LEARNING_RATE, 0.0, LEARNING_RATE}
    assert len(run.optimizer.param_groups) == 4


def test_bad_patterns_and_empty_selections_are_errors_naming_the_setting_or_listing_layer_names(stack, tmp_path):
    model, data = stack
    for bad, message, listed in (
        (
            config(include="nothing_like_this"),
            r"leave none of the \d+ targeted layers; their names ",
            "diffusion_model.",
        ),
        (
            config(block_lr="down:0.5"),
            r"block_lr entry 'down' matches no adapted layer",
            "are input_blocks.1-5, middle_block.1, ",
        ),
    ):
        with pytest.raises(EriDiffusionError, match=message) as error:
            TrainingRun(model, data, bad, str(tmp_path)).release()
        assert listed in str(error.value)
    with pytest.raises(EriDiffusionError, match="block_lr entry 'input=0.5' is not block:multiplier"):
        config(block_lr="input=0.5")
    # a pattern that is no regular expression: refused with the settings, before any model is touched
    for setting in ("include", "exclude"):
        with pytest.raises(EriDiffusionError, match=rf"adapter: {setting} 'attn2\(' is not a regular expression"):
            config(**{setting: "attn2("})


def test_block_lr_keys_name_a_block_list_with_an_optional_index_range():
    names = [
        "diffusion_model.double_blocks.0.img_attn.qkv",
        "diffusion_model.double_blocks.7.img_attn.qkv",
        "diffusion_model.single_blocks.3.linear1",
        "diffusion_model.final_layer.linear",
    ]
    assert describe_blocks(names) == "double_blocks.0-7, single_blocks.3"
    assert block_multipliers(names, "double:1,single:0.5,double.5-:0.25") == {
        names[0]: 1.0,
        names[1]: 0.25,
        names[2]: 0.5,
        names[3]: 1.0,
    }
    assert [(r.name, r.first, r.last) for r in parse_block_lr("blocks.0-9:0.5, blocks.12:2")] == [
        ("blocks", 0, 9),
        ("blocks", 12, 12),
    ]
