"""The example workflows and bad inputs, run headless through ComfyUI's own executor."""

import json
import os
import shutil

import folder_paths
import pytest
import safetensors.torch

from demo.run_demo import demo_prompt
from devkit.example_workflows import EXAMPLES, FOLDER, load_example, render_examples
from devkit.workflow import (
    execution_error,
    input_names,
    load_extension,
    run_prompt,
    set_training_settings,
    substitute,
)

NODE_IDS = {
    "EriDiffusion_LoadDataset",
    "EriDiffusion_CacheLatents",
    "EriDiffusion_LoRATrainer",
    "EriDiffusion_SampleDuringTraining",
    "EriDiffusion_SaveLoRA",
    "EriDiffusion_LossGraph",
    "EriDiffusion_TinyDemoModel",
}


@pytest.fixture(scope="module")
def registered():
    return load_extension()


def tree(path):
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, files in os.walk(path) for f in files)


def test_comfyui_custom_node_loader_registers_every_node_under_a_prefixed_id(registered):
    import nodes

    assert NODE_IDS <= set(registered)
    assert nodes.NODE_DISPLAY_NAME_MAPPINGS["EriDiffusion_LoRATrainer"] == "LoRATrainer"
    assert registered["SaveLoRA"] is not registered["EriDiffusion_SaveLoRA"]  # the host's own node is untouched


def test_every_input_has_a_tooltip(registered):
    for node_id in NODE_IDS:
        definition = registered[node_id].INPUT_TYPES()
        for group in ("required", "optional"):
            for name, spec in definition.get(group, {}).items():
                assert spec[1].get("tooltip"), f"{node_id}.{name} has no tooltip"


def test_committed_example_workflows_match_the_node_definitions(registered):
    for name, text in render_examples().items():
        with open(os.path.join(FOLDER, name)) as f:
            assert f.read() == text, f"{name} is stale: run `python -m devkit.example_workflows`"


# Inputs that only a video, audio, edit, inpainting or two-expert run uses (issue 45: an image user sees none).
MEDIA_ONLY = {"frames", "fps", "seconds", "start_image", "audio_vae", "clip_vision", "low_noise_model"}
MEDIA_ONLY |= {"inpaint", "edit_instructions"}


@pytest.mark.parametrize("example", ["sdxl_lora.json", "sd15_lora.json"])
def test_the_image_examples_nodes_show_no_video_audio_edit_or_inpaint_input(registered, example):
    shown = {
        (node["type"], name)
        for node in load_example(example)["nodes"]
        if node["type"].startswith("EriDiffusion_")
        for name in input_names(node["type"])
    }
    assert {(t, name) for t, name in shown if name in MEDIA_ONLY} == set()
    assert ("EriDiffusion_LoadDataset", "media_options") in shown  # where a clip dataset's settings go


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_example_workflow_runs_headless_and_its_lora_loads_in_loraloader(
    example, registered, datasets_dir, comfy_dirs, caplog
):
    prompt = demo_prompt(None, 12, os.path.join(datasets_dir, "dreambooth_dog"), example=example, size=128)
    prompt = substitute(
        prompt,
        overrides={
            "EriDiffusion_SampleDuringTraining": {"every": 6, "steps": 2},
            "EriDiffusion_SaveLoRA": {"filename_prefix": f"workflow/{example[:-5]}"},
            "KSampler": {"steps": 2},
        },
    )
    executor, server = run_prompt(prompt)
    assert executor.success, execution_error(executor)
    name = os.path.join("workflow", f"{example[:-5]}.safetensors")
    assert name in folder_paths.get_filename_list("loras")
    run_dirs = [d for d in os.listdir(comfy_dirs["output"]) if d.startswith("sks_dog")]
    run_dir = os.path.join(comfy_dirs["output"], sorted(run_dirs)[-1])
    assert {"loss.png", "loss.json", "summary.json"} <= set(os.listdir(run_dir))
    assert sorted(os.listdir(os.path.join(run_dir, "samples"))) == [
        "step_12_0.png",
        "step_12_1.png",
        "step_6_0.png",
        "step_6_1.png",
    ]
    with open(os.path.join(run_dir, "summary.json")) as f:
        assert json.load(f)["steps"] == 12
    # stock LoraLoader node on the same tiny model: every key matches
    import nodes

    from devkit.tiny_models import build_tiny

    model, clip, _ = build_tiny("sdxl" if example.startswith("tiny") else example.split("_")[0], seed=0)
    caplog.clear()
    nodes.LoraLoader().load_lora(model, clip, name, 1.0, 1.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]
    assert any(event == "executed" for event, _ in server.events)


def test_fine_tune_example_trains_with_its_memory_settings_saves_a_checkpoint_and_samples_it(
    registered, datasets_dir, comfy_dirs
):
    """sdxl_finetune.json on the tiny SDXL: algorithm full with Adafactor, gradient checkpointing, the fused
    backward and bf16 weights rounded stochastically, as the example sets them for a 24 GB card; SaveFineTune
    writes a checkpoint with the graph's CLIP and VAE, and the KSampler draws with the fine-tuned MODEL."""
    dog = os.path.join(datasets_dir, "dreambooth_dog")
    prompt = demo_prompt(None, 12, dog, example="sdxl_finetune.json", size=64)
    prompt = substitute(
        set_training_settings(prompt, {"gradient_checkpointing": True, "run_name": "sdxl_finetune_example"}),
        overrides={
            "EriDiffusion_SampleDuringTraining": {"every": 12, "steps": 2},
            "EriDiffusion_SaveFineTune": {"filename_prefix": "workflow/sdxl_finetune", "overwrite": True},
            "KSampler": {"steps": 2},
            "SaveImage": {"filename_prefix": "workflow/sdxl_finetune"},
        },
    )
    executor, _ = run_prompt(prompt)
    assert executor.success, execution_error(executor)
    with open(os.path.join(comfy_dirs["output"], "sdxl_finetune_example", "summary.json")) as f:
        summary = json.load(f)
    config = summary["config"]
    assert (config["adapter"]["algorithm"], config["optimizer"]) == ("full", "Adafactor")
    assert config["gradient_checkpointing"] is True and config["fused_backward"] is True
    assert config["precision"] == {"fine_tune_dtype": "bf16", "sharding": "none", "stochastic_rounding": True}
    print(f"eval loss {summary['eval_loss_before']:.4f} -> {summary['eval_loss_after']:.4f}")
    assert summary["eval_loss_after"] < 0.9 * summary["eval_loss_before"]
    path = os.path.join(folder_paths.get_folder_paths("checkpoints")[0], "workflow", "sdxl_finetune.safetensors")
    with safetensors.safe_open(path, "pt") as f:
        keys, metadata = set(f.keys()), f.metadata()
    assert metadata["eridiffusion_trained"] == "weights"
    for prefix in ("model.diffusion_model.", "conditioner.embedders.", "first_stage_model."):  # model, CLIP, VAE
        assert any(key.startswith(prefix) for key in keys), prefix
    images = os.listdir(os.path.join(comfy_dirs["output"], "workflow"))
    assert [name for name in images if name.startswith("sdxl_finetune")], images


def bad_dataset(datasets_dir, tmp_path, case):
    folder = tmp_path / "bad"
    shutil.copytree(os.path.join(datasets_dir, "dreambooth_dog"), folder)
    if case == "missing folder":
        shutil.rmtree(folder)
        return folder, "bad"
    if case == "corrupt image":
        (folder / "02.jpg").write_bytes((folder / "02.jpg").read_bytes()[:2000])
        return folder, "02.jpg"
    if case == "missing caption":
        (folder / "03.txt").unlink()
        return folder, "03.jpg"
    if case == "non-image file":
        (folder / "notes.pdf").write_bytes(b"%PDF-1.4")
        return folder, "notes.pdf"
    if case == "caption without image":
        (folder / "04.jpg").unlink()
        return folder, "04.txt"
    raise ValueError(case)


@pytest.mark.parametrize(
    "case", ["missing folder", "corrupt image", "missing caption", "non-image file", "caption without image"]
)
def test_bad_dataset_stops_the_workflow_with_an_error_naming_the_file_and_writes_nothing(
    case, registered, datasets_dir, comfy_dirs, tmp_path
):
    folder, named = bad_dataset(datasets_dir, tmp_path, case)
    before = (tree(comfy_dirs["output"]), tree(comfy_dirs["loras"]))
    executor, _ = run_prompt(demo_prompt(None, 5, str(folder), example="sd15_lora.json", size=128))
    assert not executor.success
    message = execution_error(executor)
    assert message.startswith("EriDiffusion_LoadDataset") and named in message, message
    assert (tree(comfy_dirs["output"]), tree(comfy_dirs["loras"])) == before


def test_lora_tools_example_converts_resizes_and_saves_an_image_of_each(registered, family_lora, comfy_dirs, tmp_path):
    from devkit.example_workflows import load_example
    from devkit.foreign_loras import write_convention
    from devkit.workflow import ui_to_api

    lora = family_lora("sdxl")
    foreign = write_convention(
        lora["model"].model, lora["path"], "ai-toolkit", "sdxl", str(tmp_path / "ai.safetensors")
    )
    prompt = substitute(
        ui_to_api(load_example("lora_tools.json")),
        replacements={"CheckpointLoaderSimple": ("EriDiffusion_TinyDemoModel", {"architecture": "sdxl", "seed": 0})},
        overrides={
            "EriDiffusion_ConvertLoRA": {"lora": foreign, "output": "example/converted", "overwrite": True},
            "EriDiffusion_ResizeLoRA": {"rank": 2, "output": "example/resized", "overwrite": True},
            "EmptyLatentImage": {"width": 64, "height": 64},
            "KSampler": {"steps": 2},
        },
    )
    executor, _ = run_prompt(prompt)
    assert executor.success, execution_error(executor)
    resized = safetensors.torch.load_file(os.path.join(comfy_dirs["loras"], "example", "resized.safetensors"))
    assert {v.shape[0] for k, v in resized.items() if k.endswith(".lora_down.weight")} == {2}
    import numpy
    from PIL import Image

    images = {}
    for name in ("converted", "resized"):
        saved = sorted(f for f in os.listdir(os.path.join(comfy_dirs["output"], "eridiffusion")) if f.startswith(name))
        images[name] = numpy.asarray(Image.open(os.path.join(comfy_dirs["output"], "eridiffusion", saved[-1])))
    assert images["converted"].shape == images["resized"].shape == (64, 64, 3)
