"""Fill / inpaint probed as users run it: CacheLatents' inpaint on a model without inpainting inputs is
named from the loaded model before any image is encoded headless, and in the graph (where only the trainer
sees the MODEL, after CacheLatents) before the run's folder is made; so is a sample setting the model ignores."""

import os

import pytest

from devkit.headless import CONFIGS, run_cli, write_yaml
from devkit.workflow import QUICK, run_named, training_prompt, with_sampler

TINY = os.path.join(CONFIGS, "tiny_demo.yaml")


@pytest.mark.parametrize("mode", [["--dry-run"], []], ids=["dry run", "train"])
def test_inpaint_on_a_model_without_inpainting_inputs_is_refused_before_any_image_is_encoded(mode, tmp_path):
    config = write_yaml(tmp_path / "run.yaml", f"_base_: {TINY}\nmodel: tiny-sd15\ncache: {{inpaint: true}}\n")
    done = run_cli("train", config, *mode, "--output", tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1] == (
        "eridiffusion: error: CacheLatents' inpaint is on (masked images), but SD15 has no inpainting inputs to "
        "read them; turn inpaint off (masks/ then weigh the loss), or train an inpainting model (Flux Fill)."
    )
    out = tmp_path / "out"
    assert (sorted(os.listdir(out)) if out.is_dir() else []) == []  # no latent cache, no run folder


def test_inpaint_on_a_model_without_inpainting_inputs_is_refused_in_the_graph_before_the_run_folder_is_made(
    registered, photos
):
    prompt = training_prompt(photos(1), {**QUICK, "run_name": "inpaint_unread"}, cache_options={"inpaint": True})
    outcome = run_named(prompt, "inpaint_unread")
    assert outcome.error == (
        "EriDiffusion_LoRATrainer: CacheLatents' inpaint is on (masked images), but SD15 has no inpainting inputs "
        "to read them; turn inpaint off (masks/ then weigh the loss), or train an inpainting model (Flux Fill)."
    )
    assert not os.path.exists(outcome.run_dir)  # no run folder, no workflow.json in it


def test_a_sample_guidance_the_model_ignores_is_refused_in_the_graph_before_the_run_folder_is_made(registered, photos):
    prompt = with_sampler(training_prompt(photos(1), {**QUICK, "run_name": "guidance_unread"}), prompts="a dog --g 3")
    outcome = run_named(prompt, "guidance_unread")
    assert outcome.error == (
        "EriDiffusion_LoRATrainer: SampleDuringTraining: prompt 'a dog' sets --g 3, but BaseModel has no guidance "
        "embedding; use --cfg for classifier-free guidance."
    )
    assert not os.path.exists(outcome.run_dir)
