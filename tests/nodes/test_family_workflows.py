"""The example workflows of Z-Image, Flux.1-dev, Flux.2-klein, Qwen-Image-Edit and Wan 2.2 14B's two
experts, run through ComfyUI's executor as committed, their loaders swapped for tiny stacks of the family
(devkit.workflow.with_family_stack: Wan's low-noise expert a second stack) and their sizes and steps cut
for a CPU: each trains, saves its LoRA (each expert's) into models/loras and draws its test image or clip
through the template's own nodes (ModelSamplingAuraFlow, FluxGuidance, KSamplerAdvanced ...), which stay
in the graph and run."""

import json
import os
import shutil

import numpy as np
import pytest
from PIL import Image

from devkit import tiny_family_node
from devkit.edit_pairs import make_edit_pairs
from devkit.example_graphs import LOW_NOISE_LORA
from devkit.example_workflows import load_example
from devkit.tiny_models import TINY_FAMILIES, family_params
from devkit.workflow import (
    execution_error,
    load_extension,
    missing_on_host,
    run_prompt,
    set_training_settings,
    substitute,
    ui_to_api,
    with_family_stack,
)
from eridiffusion.comfy_compat import host_version

SIZE = 64
# Each example's tiny family, the template nodes its test image goes through and the side of that
# image (or clip). Flux.2-klein's is 32: the tiny stack's TAEF2 decodes at 8x what EmptyFlux2LatentImage lays
# out at 16x (the FLUX.2 VAE's packing); Qwen-Image-Edit's test image starts from the reference
# scaled to SIZE (tiny_prompt).
EXAMPLES = {
    "z_image_lora.json": ("z_image", {"ModelSamplingAuraFlow"}, SIZE),
    "flux_dev_lora.json": ("flux_dev", {"FluxGuidance", "ConditioningZeroOut"}, SIZE),
    "flux2_klein_lora.json": ("flux2_klein_4b", {"CFGGuider", "Flux2Scheduler", "SamplerCustomAdvanced"}, SIZE // 2),
    "qwen_image_edit_lora.json": (
        "qwen_image_edit",
        {"TextEncodeQwenImageEditPlus", "FluxKontextMultiReferenceLatentMethod", "ModelSamplingAuraFlow", "CFGNorm"},
        SIZE,
    ),
    # Wan 2.2 T2V A14B is Wan 2.1 14B's architecture twice (wan21_t2v's stack, seeded 0 and 1)
    "wan22_t2v_experts_lora.json": (
        "wan21_t2v",
        {"ModelSamplingSD3", "EmptyHunyuanLatentVideo", "KSamplerAdvanced", "CreateVideo", "SaveVideo"},
        SIZE,
    ),
    "wan22_i2v_experts_lora.json": (
        "wan22_i2v_14b",
        {"ModelSamplingSD3", "LoadImage", "WanImageToVideo", "KSamplerAdvanced", "CreateVideo", "SaveVideo"},
        SIZE,
    ),
}
EXPERTS = {"wan22_t2v_experts_lora.json", "wan22_i2v_experts_lora.json"}
TEST_FRAMES = 5  # the test clip's and the samples' frames: 4k+1, as the tiny Wan VAE takes them
TINY = {
    "steps": 4,
    "dtype": "fp32",
    "rank": 4,
    "alpha": 4.0,
    "gradient_checkpointing": False,
    "vram_budget_gib": 0.0,  # a budget is for a CUDA GPU: the CPU refuses one
}


@pytest.fixture(scope="module")
def registered():
    mappings = load_extension()
    tiny_family_node.register()
    return mappings


def tiny_prompt(example, family, dataset):
    """`example` as an API prompt on the tiny stack of `family`, sized for a CPU."""
    stem = example[: -len(".json")]
    latent = {"width": SIZE, "height": SIZE}
    video = TINY_FAMILIES[family].video_frames  # a video family: trained on clips of this many frames
    clips, sample_frames = ({"frames": video, "fps": 16.0}, {"frames": TEST_FRAMES}) if video else ({}, {})
    prompt = substitute(
        with_family_stack(ui_to_api(load_example(example)), family),
        overrides={
            "EriDiffusion_CacheLatents": {"resolution": SIZE},
            "EriDiffusion_LoadDataset": {"folder": dataset},
            "EriDiffusion_DatasetMediaOptions": clips,  # (the video examples' own)
            "EriDiffusion_SampleDuringTraining": {**latent, "steps": 2, "every": TINY["steps"]},
            "EriDiffusion_SampleMediaOptions": sample_frames,
            "EriDiffusion_SaveLoRA": {"filename_prefix": f"family_workflow/{stem}"},
            "EmptySD3LatentImage": latent,
            "EmptyFlux2LatentImage": latent,
            "Flux2Scheduler": {**latent, "steps": 2},
            "KSampler": {"steps": 2},
            "SaveImage": {"filename_prefix": f"family_workflow/{stem}"},
            "EmptyHunyuanLatentVideo": {**latent, "length": TEST_FRAMES},
            "WanImageToVideo": {**latent, "length": TEST_FRAMES},
            "SaveVideo": {"filename_prefix": f"family_workflow/{stem}"},
        },
    )
    for node in prompt.values():
        inputs = node["inputs"]
        if node["class_type"] == "KSamplerAdvanced":  # the template's 20 steps handed over at 10: 2 at 1
            inputs.update({k: inputs[k] // 10 for k in ("steps", "start_at_step", "end_at_step")})
        if node["class_type"] == "EriDiffusion_SaveLoRA" and inputs["lora"][1] == LOW_NOISE_LORA[1]:
            inputs["filename_prefix"] += "_low_noise"
        # FluxKontextImageScale scales the reference to about a megapixel, where the tiny VAE takes
        # half a minute an image on a CPU: the test image starts from it at SIZE instead
        # (TextEncodeQwenImageEditPlus still encodes it at a megapixel, as the template does)
        if node["class_type"] == "FluxKontextImageScale":
            scaled = {"upscale_method": "area", "width": SIZE, "height": SIZE, "crop": "center"}
            node.update(class_type="ImageScale", inputs={"image": node["inputs"]["image"], **scaled})
    return set_training_settings(prompt, {**TINY, "run_name": f"family_workflow_{stem}"})


def example_params():
    """Each example, skipped on a ComfyUI that lacks its family's classes (as the family's tests are)."""
    params = []
    for example, (family, _, _) in EXAMPLES.items():
        (param,) = family_params([family])
        params.append(pytest.param(example, id=example[: -len(".json")], marks=param.marks))
    return params


@pytest.mark.parametrize("example", example_params())
def test_a_family_example_trains_saves_its_lora_and_draws_through_the_templates_nodes(
    example, registered, datasets_dir, comfy_dirs, request
):
    import folder_paths

    family, template_nodes, side = EXAMPLES[example]
    photos = os.path.join(datasets_dir, "dreambooth_dog")
    # the edit example's folder and references, where it names them: input/edit_pairs
    make_edit_pairs(photos, os.path.join(folder_paths.get_input_directory(), "edit_pairs"), ("00", "01", "02"), 1)
    # the image-to-video example's Start image, where it names it: input/dreambooth_dog/00.jpg
    shutil.copytree(photos, os.path.join(folder_paths.get_input_directory(), "dreambooth_dog"), dirs_exist_ok=True)
    clips = TINY_FAMILIES[family].video_frames
    dataset = "edit_pairs" if family == "qwen_image_edit" else photos
    prompt = tiny_prompt(example, family, request.getfixturevalue("dog_clips").folder if clips else dataset)
    missing = missing_on_host(prompt)
    if missing:
        pytest.skip(f"ComfyUI {host_version()} has no {', '.join(sorted(set(missing)))}")
    executor, server = run_prompt(prompt)
    assert executor.success, execution_error(executor)
    stem = example[: -len(".json")]
    assert f"family_workflow/{stem}.safetensors" in folder_paths.get_filename_list("loras")
    ran = {prompt[e["node"]]["class_type"] for kind, e in server.events if kind == "executing" and e.get("node")}
    assert template_nodes | {"EriDiffusion_LoRATrainer", "VAEDecode"} <= ran
    if example in EXPERTS:
        assert_both_experts_trained_and_drew_the_clip(stem, side, comfy_dirs["output"])
        return
    saved = os.path.join(comfy_dirs["output"], "family_workflow", f"{stem}_00001_.png")
    assert np.asarray(Image.open(saved)).shape == (side, side, 3)


def assert_both_experts_trained_and_drew_the_clip(stem, side, output):
    """Each expert trained some of the steps and its LoRA was saved, and the test clip went through both
    KSamplerAdvanced into SaveVideo: TEST_FRAMES frames of `side` pixels."""
    import folder_paths

    from devkit.pyav import pyav

    with open(os.path.join(output, f"family_workflow_{stem}", "summary.json")) as f:
        experts = json.load(f)["experts"]
    steps = [experts[name]["steps"] for name in ("high_noise", "low_noise")]
    assert sum(steps) == TINY["steps"] and min(steps) > 0, experts
    assert f"family_workflow/{stem}_low_noise.safetensors" in folder_paths.get_filename_list("loras")
    with pyav().open(os.path.join(output, "family_workflow", f"{stem}_00001_.mp4")) as container:
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    assert [frame.shape for frame in frames] == [(side, side, 3)] * TEST_FRAMES
