"""ACE-Step 1.5 as users train it: a tiny stack of the host's own classes through ComfyUI's executor
(LoadDataset of a folder of audio files → CacheLatents → LoRATrainer with SampleDuringTraining →
SaveLoRA, every node under torch.inference_mode). The run writes its samples as FLAC, lists them in
its summary, and its LoRA loads in stock ComfyUI with zero unmatched keys."""

import json
import logging
import os

import av
import pytest

from devkit import tiny_family_node
from devkit.tiny_models import TINY_FAMILIES, build_tiny, family_params
from devkit.workflow import QUICK, Outcome, load_extension, run_prompt, training_prompt, with_sampler

FAMILY = "ace_step15"
SECONDS = TINY_FAMILIES[FAMILY].audio_seconds


@pytest.fixture(scope="module")
def registered():
    mappings = load_extension()
    tiny_family_node.register()
    return mappings


def _prompt(music_folder, run_name):
    """The training prompt of the tiny ACE-Step 1.5 stack on `music_folder`, sampled at its end."""
    stack = {"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": FAMILY, "seed": 0}}
    settings = {**QUICK, "steps": 200, "rank": 8, "alpha": 8.0, "targets": "all-linear", "run_name": run_name}
    prompt = training_prompt(
        music_folder,
        settings,
        save={"filename_prefix": f"{run_name}/music"},
        stack=stack,
        dataset_options={"seconds": SECONDS},
    )
    return with_sampler(prompt, prompts="rock, distorted guitar, drums, energetic", steps=2, cfg=1.0, seconds=SECONDS)


@pytest.mark.parametrize("family", family_params([FAMILY]))
def test_an_ace_step15_stack_trains_from_audio_files_through_the_executor_writes_audio_samples_and_its_lora_loads(
    family, registered, music_folder, comfy_dirs, caplog
):
    import folder_paths
    import nodes

    run_name = "ace_step15_node"
    executor, _ = run_prompt(_prompt(music_folder, run_name))
    outcome = Outcome(executor, os.path.join(folder_paths.get_output_directory(), run_name))
    assert outcome.success, outcome.error
    with open(os.path.join(outcome.run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["eval_loss_after"] < 0.7 * summary["eval_loss_before"], summary
    written = [path for path in summary["samples"] if path.endswith(".flac")]
    assert written, summary["samples"]
    with av.open(written[-1]) as container:
        stream = container.streams.audio[0]
        decoded = sum(frame.samples for frame in container.decode(stream))
    assert abs(decoded / stream.rate - SECONDS) < 0.05, (decoded, stream.rate)
    model, clip, _ = build_tiny(FAMILY, seed=0)
    with caplog.at_level(logging.WARNING):
        nodes.LoraLoader().load_lora(model, clip, f"{run_name}/music.safetensors", 1.0, 0.0)
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]
