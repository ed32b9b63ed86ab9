"""Issue 41's probe: settings the trainer refused only once its run had started (after the model
loaded, its images were encoded and its run folder was made) are refused by the one preflight, by
`--dry-run` as by `train`, with no run folder left behind."""

import os
import re

import pytest

from devkit.headless import CONFIGS, named_in, refused_train, write_yaml

pytestmark = pytest.mark.one_host("the preflight's refusals")

TINY = os.path.join(CONFIGS, "tiny_demo.yaml")
MODES = pytest.mark.parametrize("mode", [["--dry-run"], []], ids=["dry run", "train"])


@pytest.fixture
def refused(tmp_path, command_line):
    """(settings over tiny_demo.yaml, mode) -> the error line `train` refuses them with (run by the module's
    one command process), after the config file's name, once it is checked that no run folder was left."""

    def refusal(text, mode):
        config = write_yaml(tmp_path / "run.yaml", f"_base_: {TINY}\n{text}")
        error, left = refused_train(config, tmp_path / "out", *mode, cwd=tmp_path, process=command_line)
        assert [name for name in left if name != "loras"] == []  # no run folder
        return named_in(config, error)

    return refusal


@MODES
def test_the_two_expert_settings_with_one_model_are_refused_before_the_run_starts(mode, refused):
    error = refused("objective: {expert_boundary: 0.9}\n", mode)
    assert error.startswith("expert_boundary and switch_boundary_every are for two experts in one run")


@MODES
def test_cuda_graphs_on_where_no_gpu_trains_is_refused_before_the_run_starts(mode, refused):
    error = refused("train: {cuda_graphs: 'on'}\n", mode)
    assert error == "cuda_graphs needs a CUDA device; this model trains on cpu. Turn cuda_graphs off."


@MODES
def test_cuda_graphs_on_with_streamed_weights_is_refused_before_the_run_starts(mode, refused):
    error = refused("train: {cuda_graphs: 'on', weights_vram_gib: 1.0, gradient_checkpointing: true}\n", mode)
    assert error.startswith("cuda_graphs cannot replay weights streamed from CPU memory (weights_vram_gib > 0)")


@MODES
def test_a_vram_budget_where_no_gpu_trains_is_refused_before_the_run_starts(mode, refused):
    error = refused("train: {vram_budget_gib: 8.0, gradient_checkpointing: true}\n", mode)
    assert error == "vram_budget_gib plans GPU memory, and this run trains on cpu: set vram_budget_gib to 0."


@MODES
def test_more_blocks_to_swap_than_the_model_has_is_refused_before_the_run_starts(mode, refused):
    error = refused("train: {blocks_to_swap: 500, gradient_checkpointing: true}\n", mode)
    assert re.fullmatch(r"blocks_to_swap 500 is more than the (\d+) blocks this model has: set at most \1\.", error), (
        error
    )


@MODES
def test_block_swap_without_checkpointing_is_refused_before_the_run_starts(mode, refused):
    error = refused("train: {blocks_to_swap: 2}\n", mode)
    assert "turn gradient_checkpointing on" in error
