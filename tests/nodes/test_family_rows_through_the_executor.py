"""The rows issues 28, 31 and 32 added (SD 2.x, the SDXL Refiner, ComfyUI 0.28's 2026 classes, the
image-to-video rows, Flux.2-klein 4B and 9B, Qwen-Image-Edit) train the way users run training: each
tiny stack through ComfyUI's executor (LoadDataset → CacheLatents → LoRATrainer → SaveLoRA, every node
under torch.inference_mode) on the real photos (clips made from them for video), its evaluation loss
falling, and its saved LoRA loaded by stock LoraLoader with no unmatched key, changing the model; the
image-to-video rows with CacheLatents' start_image on. A quarter of the family's steps: that each family
learns (its loss down 30% in its full run) is test_families.py's; this one is the executor's wiring.
(ACE-Step 1.5's: tests/nodes/test_audio_training_node.py.)"""

import dataclasses
import json
import logging
import os

import pytest
import torch

from devkit import tiny_family_node
from devkit.short_runs import learning_steps
from devkit.stock_comfyui import ProbeInput, relative_error
from devkit.tiny_models import TINY_FAMILIES, build_tiny, family_params
from devkit.workflow import load_extension, run_training

ROWS = [
    "boogu",
    "chroma_radiance",
    "cogvideox_t2v",
    "cosmos_predict2_t2i",
    "flux2_klein_4b",
    "flux2_klein_9b",
    "flux_fill",
    "hidream_o1",
    "hunyuan_dit",
    "hunyuan_video15_i2v",
    "ideogram4",
    "joyimage",
    "krea2",
    "lens",
    "mochi",
    "pixeldit",
    "qwen_image_edit",
    "sd20",
    "sdxl_refiner",
    "wan21_fun_control",
    "wan21_i2v",
    "wan22_animate",
    "wan22_i2v_14b",
    "wan22_s2v",
    "z_image_pixel_space",
]
EXECUTOR_SHARE = 4  # of each family's steps (tiny_stack.TinyFamily.steps)


@pytest.fixture(scope="module")
def registered():
    mappings = load_extension()
    tiny_family_node.register()
    return mappings


@pytest.mark.parametrize("name", family_params(ROWS))
def test_a_row_trains_through_the_executor_and_its_lora_loads_in_stock_comfyui(
    name, registered, datasets_dir, dog_clips, caplog
):
    import nodes

    from eridiffusion.training.data.dataset import load_dataset
    from eridiffusion.training.data.training_data import build_training_data

    tiny = TINY_FAMILIES[name]
    folder = dog_clips.folder if tiny.video_frames else os.path.join(datasets_dir, "dreambooth_dog")
    options = {"frames": tiny.video_frames, "fps": 16.0} if tiny.video_frames else {}
    outcome = run_training(
        folder,
        f"row_{name}",
        resolution=tiny.resolution,
        trainer={
            "steps": learning_steps(tiny.steps // EXECUTOR_SHARE),
            "learning_rate": tiny.learning_rate,
            "rank": 8,
            "alpha": 8.0,
            "targets": "all-linear",
        },
        save={"filename_prefix": f"row_{name}/lora"},
        stack={"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": name, "seed": 0}},
        dataset_options=options,
        cache_options={"start_image": tiny.start_image, "inpaint": tiny.inpaint},
    )
    assert outcome.success, outcome.error
    with open(os.path.join(outcome.run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["eval_loss_after"] < summary["eval_loss_before"], summary

    model, clip, vae = build_tiny(name, seed=0)
    with caplog.at_level(logging.WARNING):
        patched, _ = nodes.LoraLoader().load_lora(model, clip, f"row_{name}/lora.safetensors", 1.0, 0.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]
    with torch.inference_mode():
        # the probe is made of the first sample alone: its photo (or clip) is the only one encoded again
        dataset = load_dataset(folder, **options)
        dataset = dataclasses.replace(dataset, records=dataset.records[:1])
        data = build_training_data(
            dataset, vae, clip, tiny.resolution, os.path.join(outcome.run_dir, "probe"), start_image=tiny.start_image
        )
    probe = ProbeInput.of(model, data)
    assert relative_error(probe.output(patched), probe.output(model)) > 1e-2  # the LoRA changes the model
