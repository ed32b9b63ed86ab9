"""Evaluation-loss drop of every tiny family's short training run, with the settings of
tests/training/model/test_families.py (rank 8, all-linear, fp32, the family's steps and learning rate,
4 real photos or clips made from them, each family's default objective). CPU is enough; prints
JSON and writes $OUT/family_losses.json.

    python -m bench.family_losses [family ...]
"""

import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(names):
    from devkit.paths import shared_datasets
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-families-")
    import torch

    from devkit.photo_clips import CLIP_FRAMES, write_dog_clips  # the clips the tests train on
    from devkit.tiny_models import TINY_FAMILIES, build_tiny
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.data.dataset import load_dataset
    from eridiffusion.training.data.training_data import build_training_data
    from eridiffusion.training.model.families import family_of, resolve_objective
    from eridiffusion.training.model.objective import ObjectiveSpec
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.trainer import train_lora

    work = tempfile.mkdtemp(prefix="eridiffusion-family-runs-")
    photos = os.path.join(shared_datasets(), "dreambooth_dog")
    results = {}
    for name in names or sorted(TINY_FAMILIES):
        family = TINY_FAMILIES[name]
        model, clip, vae = build_tiny(name, seed=0)
        dataset = (
            load_dataset(write_dog_clips(photos, os.path.join(work, "clips")), frames=CLIP_FRAMES, fps=16.0)
            if family.video_frames
            else load_dataset(photos)
        )
        with torch.inference_mode():
            data = build_training_data(dataset, vae, clip, family.resolution, os.path.join(work, name, "cache"))
        data.samples = data.samples[:4]
        config = TrainConfig(
            gradient_checkpointing=False,
            steps=family.steps,
            learning_rate=family.learning_rate,
            dtype="fp32",
            seed=0,
            log_every=family.steps,
            adapter=AdapterSpec(rank=8, alpha=8.0, targets="all-linear"),
            run_name=name,
        )
        with torch.inference_mode(False):
            result = train_lora(model, data, config, os.path.join(work, name, "run"))
        sampling = resolve_objective(ObjectiveSpec(), family_of(model.model))
        results[name] = {
            "eval_loss_before": round(result.eval_loss_before, 4),
            "eval_loss_after": round(result.eval_loss_after, 4),
            "drop": round(1 - result.eval_loss_after / result.eval_loss_before, 3),
            "steps": family.steps,
            "timesteps": sampling.timestep_sampling,
            "shift": sampling.shift,
            "frames": family.video_frames or 1,
        }
        print(name, json.dumps(results[name]), flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "family_losses.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
