"""The example workflows that train on sound, run through ComfyUI's executor as committed, their loaders
swapped for tiny stacks of the family (devkit.workflow.with_family_stack: LTX-2's LTXVAudioVAELoader its
tiny audio VAE) and their lengths and steps cut for a CPU: LTX-2 trains on clips with their sound and
draws its test clip with sound through the template's LTXV nodes; ACE-Step 1.5 trains on music and makes
its test song through TextEncodeAceStepAudio1.5, ModelSamplingAuraFlow and SaveAudioMP3."""

import json
import os

import pytest

from devkit import tiny_family_node
from devkit.example_workflows import load_example
from devkit.photo_clips import CLIP_FRAMES, write_dog_clips_with_sound
from devkit.pyav import pyav
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
TINY = {"steps": 4, "dtype": "fp32", "rank": 4, "alpha": 4.0, "gradient_checkpointing": False, "vram_budget_gib": 0.0}
LTX2_NODES = {
    "LTXVConditioning",
    "EmptyLTXVLatentVideo",
    "LTXVEmptyLatentAudio",
    "LTXVConcatAVLatent",
    "LTXVScheduler",
    "CFGGuider",
    "SamplerCustomAdvanced",
    "LTXVSeparateAVLatent",
    "VAEDecodeTiled",
    "LTXVAudioVAEDecode",
    "CreateVideo",
    "SaveVideo",
}
ACE_NODES = {
    "TextEncodeAceStepAudio1.5",
    "ConditioningZeroOut",
    "EmptyAceStep1.5LatentAudio",
    "ModelSamplingAuraFlow",
    "KSampler",
    "VAEDecodeAudio",
    "SaveAudioMP3",
}
SECONDS = TINY_FAMILIES["ace_step15"].audio_seconds


@pytest.fixture(scope="module")
def registered():
    mappings = load_extension()
    tiny_family_node.register()
    return mappings


def tiny_prompt(example, family, dataset, overrides):
    """`example` as an API prompt on the tiny stack of `family`, trained on `dataset`, its widgets
    overridden by `overrides` ({node type: {input: value}}) besides the run's names and sampler steps."""
    stem = example[: -len(".json")]
    prefix = {"filename_prefix": f"audio_workflow/{stem}"}
    prompt = substitute(
        with_family_stack(ui_to_api(load_example(example)), family),
        overrides={
            "EriDiffusion_CacheLatents": {"resolution": SIZE},
            "EriDiffusion_SaveLoRA": prefix,
            "KSampler": {"steps": 2},
            "LTXVScheduler": {"steps": 2},
            "SaveVideo": prefix,
            "SaveAudioMP3": prefix,
            **overrides,
            "EriDiffusion_LoadDataset": {"folder": dataset},
        },
    )
    return set_training_settings(prompt, {**TINY, "run_name": f"audio_workflow_{stem}"})


def run_example(prompt):
    """Run `prompt` (skipped where this host lacks one of its nodes or choices); the types that ran."""
    missing = missing_on_host(prompt)
    if missing:
        pytest.skip(f"ComfyUI {host_version()} has no {', '.join(sorted(set(missing)))}")
    executor, server = run_prompt(prompt)
    assert executor.success, execution_error(executor)
    return {prompt[e["node"]]["class_type"] for kind, e in server.events if kind == "executing" and e.get("node")}


def summary_of(example, output):
    with open(os.path.join(output, f"audio_workflow_{example[: -len('.json')]}", "summary.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("family", family_params(["ltx2"]))
def test_the_ltx2_sound_example_trains_both_streams_and_draws_its_test_clip_with_sound(
    family, registered, datasets_dir, comfy_dirs, tmp_path
):
    import folder_paths

    example = "ltx2_sound_lora.json"
    clips = write_dog_clips_with_sound(os.path.join(datasets_dir, "dreambooth_dog"), str(tmp_path / "clips"))
    video = {"width": SIZE, "height": SIZE}
    overrides = {
        "EriDiffusion_DatasetMediaOptions": {"frames": CLIP_FRAMES, "fps": 16.0},
        "EriDiffusion_SampleDuringTraining": {**video, "steps": 2, "every": TINY["steps"]},
        "EriDiffusion_SampleMediaOptions": {"frames": CLIP_FRAMES},
        "EmptyLTXVLatentVideo": {**video, "length": CLIP_FRAMES},
        "LTXVEmptyLatentAudio": {"frames_number": CLIP_FRAMES},
    }
    ran = run_example(tiny_prompt(example, family, clips, overrides))
    assert LTX2_NODES | {"EriDiffusion_LoRATrainer", tiny_family_node.AUDIO_VAE_NODE} <= ran
    assert "audio_workflow/ltx2_sound_lora.safetensors" in folder_paths.get_filename_list("loras")
    summary = summary_of(example, comfy_dirs["output"])
    assert set(summary["stream_losses"] or ()) == {"video", "audio"}, summary  # None: trained without sound
    with pyav().open(summary["samples"][-1]) as container:  # the samples during training: with their sound
        assert [s.type for s in container.streams] == ["video", "audio"]
    with pyav().open(os.path.join(comfy_dirs["output"], "audio_workflow", "ltx2_sound_lora_00001_.mp4")) as container:
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
        container.seek(0)
        audio = container.streams.audio[0]
        heard = sum(frame.samples for frame in container.decode(audio)) / audio.rate
    assert [frame.shape for frame in frames] == [(SIZE, SIZE, 3)] * CLIP_FRAMES
    assert abs(heard - CLIP_FRAMES / 24) < 0.1, heard  # the template's 24 fps: the sound lasts as the frames do


@pytest.mark.parametrize("family", family_params(["ace_step15"]))
def test_the_ace_step15_example_trains_on_music_and_makes_its_test_song(family, registered, music_folder, comfy_dirs):
    import folder_paths

    example = "ace_step15_lora.json"
    overrides = {
        "EriDiffusion_DatasetMediaOptions": {"seconds": SECONDS},
        "EriDiffusion_SampleDuringTraining": {"steps": 2, "every": TINY["steps"]},
        "EriDiffusion_SampleMediaOptions": {"seconds": SECONDS},
        "TextEncodeAceStepAudio1.5": {"duration": SECONDS},
        "EmptyAceStep1.5LatentAudio": {"seconds": SECONDS},
    }
    ran = run_example(tiny_prompt(example, family, music_folder, overrides))
    assert ACE_NODES | {"EriDiffusion_LoRATrainer"} <= ran
    assert "audio_workflow/ace_step15_lora.safetensors" in folder_paths.get_filename_list("loras")
    assert [path for path in summary_of(example, comfy_dirs["output"])["samples"] if path.endswith(".flac")]
    with pyav().open(os.path.join(comfy_dirs["output"], "audio_workflow", "ace_step15_lora_00001.mp3")) as container:
        stream = container.streams.audio[0]
        heard = sum(frame.samples for frame in container.decode(stream)) / stream.rate
    assert abs(heard - SECONDS) < 0.1, heard
