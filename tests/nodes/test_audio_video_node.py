"""LTX-2 with its audio VAE trains on clips with sound the way users run it, through ComfyUI's executor:
CacheLatents' audio_vae encodes each clip's audio track, LoRATrainer trains both streams, the samples are
mp4 files with their sound, and the saved LoRA loads in stock LoraLoader with no unmatched key."""

import json
import logging
import os

import av
import pytest

from devkit import tiny_family_node
from devkit.photo_clips import CLIP_FRAMES, write_dog_clips_with_sound
from devkit.tiny_models import TINY_FAMILIES, build_tiny, family_params
from devkit.workflow import QUICK, load_extension, run_prompt, set_inputs, training_prompt, with_sampler

FAMILY = "ltx2"


@pytest.fixture(scope="module")
def registered():
    mappings = load_extension()
    tiny_family_node.register()
    return mappings


@pytest.mark.parametrize("family", family_params([FAMILY]))
def test_ltx2_trains_on_clips_with_sound_through_the_executor_and_samples_them_with_sound(
    family, registered, datasets_dir, tmp_path, caplog
):
    import folder_paths
    import nodes

    folder = write_dog_clips_with_sound(os.path.join(datasets_dir, "dreambooth_dog"), str(tmp_path / "clips"))
    tiny = TINY_FAMILIES[FAMILY]
    settings = {**QUICK, "steps": 100, "rank": 8, "alpha": 8.0, "targets": "all-linear", "run_name": "node_av"}
    prompt = training_prompt(
        folder,
        settings,
        resolution=tiny.resolution,
        save={"filename_prefix": "node_av/lora"},
        stack={"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": FAMILY, "seed": 0}},
        dataset_options={"frames": CLIP_FRAMES, "fps": 16.0},
    )
    prompt["40"] = {"class_type": tiny_family_node.AUDIO_VAE_NODE, "inputs": {"seed": 0}}
    set_inputs(prompt, "3", {"audio_vae": ["40", 0]})
    sample = {"prompts": "a photo of sks dog, rock", "steps": 2, "cfg": 1.0, "width": 96, "height": 64}
    with_sampler(prompt, **sample, frames=CLIP_FRAMES, audio_vae=["40", 0])
    executor, _ = run_prompt(prompt)
    assert executor.success
    run_dir = os.path.join(folder_paths.get_output_directory(), "node_av")
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["eval_loss_after"] < 0.7 * summary["eval_loss_before"], summary
    for stream, (before, after) in summary["stream_losses"].items():  # video and audio
        assert after < 0.7 * before, (stream, before, after)
    with av.open(summary["samples"][-1]) as container:
        assert [s.type for s in container.streams] == ["video", "audio"]
    model, clip, _ = build_tiny(FAMILY, seed=0)
    with caplog.at_level(logging.WARNING):
        nodes.LoraLoader().load_lora(model, clip, "node_av/lora.safetensors", 1.0, 0.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]
