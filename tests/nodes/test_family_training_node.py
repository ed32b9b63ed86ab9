"""Families beyond the demo's SD1.5 and SDXL as users train them: a tiny Flux.1-dev stack through
ComfyUI's executor (LoadDataset → CacheLatents → LoRATrainer → SaveLoRA, every node under
torch.inference_mode). On a GPU the step runs as CUDA graphs with the fused RoPE kernel (counted
in the copy of the package ComfyUI loaded); on the CPU the host's RoPE. The saved LoRA loads in
stock ComfyUI with zero unmatched keys."""

import importlib
import json
import logging
import os
import sys

import pytest
import torch

from devkit import tiny_family_node
from devkit.tiny_models import TINY_FAMILIES, build_tiny
from devkit.workflow import load_extension, run_training


@pytest.fixture(scope="module")
def registered():
    mappings = load_extension()
    tiny_family_node.register()
    return mappings


def test_a_flux_stack_trains_through_the_executor_and_its_lora_loads_in_stock_comfyui(
    registered, datasets_dir, comfy_dirs, monkeypatch, caplog
):
    import nodes

    kernel_calls = []
    # the kernel's module (it needs Triton) in each import of the package: ComfyUI's has its own name
    packages = [name[: -len(".comfy_compat")] for name in sys.modules if name.endswith("eridiffusion.comfy_compat")]
    for package in packages if torch.cuda.is_available() else ():
        kernel = importlib.import_module(package + ".training.speed.rope_kernel")

        def counted(*args, rotated=kernel.rotated, **kwargs):
            kernel_calls.append(1)
            return rotated(*args, **kwargs)

        monkeypatch.setattr(kernel, "rotated", counted)
    stack = {"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": "flux_dev", "seed": 0}}
    outcome = run_training(
        os.path.join(datasets_dir, "dreambooth_dog"),
        "flux_node",
        resolution=TINY_FAMILIES["flux_dev"].resolution,
        trainer={"steps": 3},
        save={"filename_prefix": "flux_node/dog"},
        stack=stack,
    )
    assert outcome.success, outcome.error
    losses = outcome.losses()
    assert losses and all(loss == loss for loss in losses)  # finite, not NaN
    assert (len(kernel_calls) > 0) == torch.cuda.is_available(), len(kernel_calls)
    model, clip, _ = build_tiny("flux_dev", seed=0)
    with caplog.at_level(logging.WARNING):
        nodes.LoraLoader().load_lora(model, clip, "flux_node/dog.safetensors", 1.0, 0.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]


def _class_no_row_names():
    """A ComfyUI model class of this host that no row of the support table names, and that
    devkit.tiny_unets can build tiny."""
    import comfy.supported_models

    from devkit.tiny_unets import GENERIC_STACKS
    from eridiffusion.training.model.families import FAMILIES

    rowed = {name for family in FAMILIES for name in family.config_classes}
    host = {model.__name__ for model in comfy.supported_models.models}
    return next(name for name in GENERIC_STACKS if name in host and name not in rowed)


def test_a_class_no_row_names_trains_generically_through_the_executor_and_its_lora_loads_in_stock_comfyui(
    registered, datasets_dir, comfy_dirs, caplog, tmp_path
):
    from devkit.stock_comfyui import ProbeInput, relative_error
    from eridiffusion.training.data.dataset import load_dataset
    from eridiffusion.training.data.training_data import build_training_data

    name = _class_no_row_names()
    stack = {"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": name, "seed": 0}}
    # 100 steps: the evaluation loss ended at 0.52 of its start on both hosts on 2026-11-30 (0.41 after 200)
    with caplog.at_level(logging.WARNING):
        outcome = run_training(
            os.path.join(datasets_dir, "dreambooth_dog"),
            f"generic_{name}",
            resolution=64,
            trainer={"steps": 100, "rank": 8, "alpha": 8.0},
            save={"filename_prefix": f"generic_{name}/dog"},
            stack=stack,
        )
    assert outcome.success, outcome.error
    said = [r.getMessage() for r in caplog.records if "no tested row" in r.getMessage()]
    assert len(said) == 1 and name in said[0], said
    with open(os.path.join(outcome.run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["eval_loss_after"] < 0.7 * summary["eval_loss_before"], summary
    import nodes

    model, clip, vae = build_tiny(name, seed=0)
    assert type(model.model.model_config).__name__ == name
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        patched, _ = nodes.LoraLoader().load_lora(model, clip, f"generic_{name}/dog.safetensors", 1.0, 0.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]
    with torch.inference_mode():
        data = build_training_data(
            load_dataset(os.path.join(datasets_dir, "dreambooth_dog")), vae, clip, 64, str(tmp_path)
        )
    probe = ProbeInput.of(model, data)
    assert relative_error(probe.output(patched), probe.output(model)) > 1e-2  # the LoRA changes the model
