"""Issue 41's probe: settings the trainer refused only once its run had started (after the model
loaded, its images were encoded and its run folder was made) are refused by the one preflight, by
`--dry-run` as by `train`, with no run folder left behind."""

import os
import re

import pytest

from devkit.headless import CONFIGS, refused_trains, write_yaml

pytestmark = pytest.mark.one_host("the preflight's refusals")

TINY = os.path.join(CONFIGS, "tiny_demo.yaml")
MODES = {"dry run": ["--dry-run"], "train": []}
MODE = pytest.mark.parametrize("mode", list(MODES))
# each case's settings over configs/tiny_demo.yaml
CASES = {
    "two experts": "objective: {expert_boundary: 0.9}\n",
    "graphs without a gpu": "train: {cuda_graphs: 'on'}\n",
    "graphs with streamed weights": "train: {cuda_graphs: 'on', weights_vram_gib: 1.0, gradient_checkpointing: true}\n",
    "budget without a gpu": "train: {vram_budget_gib: 8.0, gradient_checkpointing: true}\n",
    "too many blocks": "train: {blocks_to_swap: 500, gradient_checkpointing: true}\n",
    "swap without checkpointing": "train: {blocks_to_swap: 2}\n",
}


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """(case, mode) -> the error line `train` refused that case's config with in that mode, once it is
    checked that no run folder was left. Every case in both modes is a command of one process
    (refused_trains): the command line's start (torch, ComfyUI: ~10 s) paid once, not 12 times."""
    folder = tmp_path_factory.mktemp("probe_preflight")
    runs = {}
    for number, (case, text) in enumerate(CASES.items()):
        for mode, args in MODES.items():
            case_folder = folder / f"{number}_{args[0][2:] if args else 'train'}"
            case_folder.mkdir()
            config = write_yaml(case_folder / "run.yaml", f"_base_: {TINY}\n{text}")
            runs[case, mode] = (config, case_folder / "out", *args)
    errors = {}
    for key, (error, left) in zip(runs, refused_trains(list(runs.values()), cwd=folder), strict=True):
        assert [name for name in left if name != "loras"] == [], key  # no run folder
        errors[key] = error
    return lambda case, mode: errors[case, mode]


@MODE
def test_the_two_expert_settings_with_one_model_are_refused_before_the_run_starts(mode, refused):
    error = refused("two experts", mode)
    assert error.startswith("expert_boundary and switch_boundary_every are for two experts in one run")


@MODE
def test_cuda_graphs_on_where_no_gpu_trains_is_refused_before_the_run_starts(mode, refused):
    error = refused("graphs without a gpu", mode)
    assert error == "cuda_graphs needs a CUDA device; this model trains on cpu. Turn cuda_graphs off."


@MODE
def test_cuda_graphs_on_with_streamed_weights_is_refused_before_the_run_starts(mode, refused):
    error = refused("graphs with streamed weights", mode)
    assert error.startswith("cuda_graphs cannot replay weights streamed from CPU memory (weights_vram_gib > 0)")


@MODE
def test_a_vram_budget_where_no_gpu_trains_is_refused_before_the_run_starts(mode, refused):
    error = refused("budget without a gpu", mode)
    assert error == "vram_budget_gib plans GPU memory, and this run trains on cpu: set vram_budget_gib to 0."


@MODE
def test_more_blocks_to_swap_than_the_model_has_is_refused_before_the_run_starts(mode, refused):
    error = refused("too many blocks", mode)
    assert re.fullmatch(r"blocks_to_swap 500 is more than the (\d+) blocks this model has: set at most \1\.", error), (
        error
    )


@MODE
def test_block_swap_without_checkpointing_is_refused_before_the_run_starts(mode, refused):
    error = refused("swap without checkpointing", mode)
    assert "turn gradient_checkpointing on" in error
