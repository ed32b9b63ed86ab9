"""fp8_compute as users reach it: MemoryOptions' widget through ComfyUI's executor (every node under
torch.inference_mode). The tiny model's layers are far below the size where fp8 pays on a GPU, so
the threshold is lowered to compute them in fp8 all the same (CPU torch runs fp8 products)."""

import logging
import os
import sys

import pytest

from devkit.workflow import load_extension, run_training


@pytest.fixture(scope="module")
def registered():
    return load_extension()


def test_fp8_compute_through_the_executor_trains_in_fp8_and_saves_a_lora_stock_comfyui_loads(
    registered, datasets_dir, comfy_dirs, monkeypatch, caplog
):
    import nodes

    from devkit.tiny_models import build_tiny

    # the extension ComfyUI loaded is its own import of the package (under the checkout's folder name)
    for name, module in list(sys.modules.items()):
        if name.endswith("eridiffusion.training.speed.fp8_products"):
            monkeypatch.setattr(module, "MIN_MACS", 0)
            monkeypatch.setattr(module, "MIN_WIDTH", 0)
    dogs = os.path.join(datasets_dir, "dreambooth_dog")
    with caplog.at_level(logging.INFO):
        outcome = run_training(
            dogs,
            "fp8_node",
            trainer={"steps": 3, "dtype": "bf16", "fp8_compute": True},
            save={"filename_prefix": "fp8/dog"},
        )
    assert outcome.success, outcome.error
    counts = [r.getMessage() for r in caplog.records if "fp8_compute:" in r.getMessage()]
    assert len(counts) == 1 and " 0 of" not in counts[0], counts
    assert all(loss == loss for loss in outcome.losses())  # finite, not NaN
    model, clip, _ = build_tiny("sd15", seed=0)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        nodes.LoraLoader().load_lora(model, clip, "fp8/dog.safetensors", 1.0, 1.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]
