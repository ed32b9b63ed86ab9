"""CacheLatents' resolution list as users reach it: through ComfyUI's executor, a run whose cache
holds every photo at two sizes trains, and the cache folder keeps one latent per photo and size."""

import os
import shutil

import pytest

from devkit.workflow import QUICK, Outcome, load_extension, run_prompt, training_prompt


@pytest.fixture(scope="module")
def registered():
    return load_extension()


def test_extra_resolutions_cache_every_photo_at_each_size_and_the_run_trains(registered, datasets_dir, tmp_path):
    import folder_paths

    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("00", "01", "02"):
        for ext in (".jpg", ".txt"):
            shutil.copy(os.path.join(datasets_dir, "dreambooth_dog", name + ext), photos)
    run_name = "extra_resolutions_node"
    prompt = training_prompt(photos, {**QUICK, "steps": 4, "run_name": run_name}, cache_folder=tmp_path / "cache")
    prompt["3"]["inputs"].update(resolution=128, extra_resolutions="64")
    executor, _ = run_prompt(prompt)
    outcome = Outcome(executor, os.path.join(folder_paths.get_output_directory(), run_name))
    assert outcome.success, outcome.error
    assert len(outcome.losses()) == 4
    assert len(os.listdir(tmp_path / "cache" / "latents")) == 2 * 3
