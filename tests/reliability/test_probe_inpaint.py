"""Fill / inpaint probed headless: CacheLatents' inpaint on a model without inpainting inputs is named
from the loaded model before any image is encoded (the graph's trainer can only tell after CacheLatents,
which has no MODEL input)."""

import os

import pytest

from devkit.headless import CONFIGS, run_cli, write_yaml

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
