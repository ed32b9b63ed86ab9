"""The process test_killed_runs.py kills: `python -m tests.reliability.killed_run BASE DATASET RUN_NAME`
trains a tiny SD1.5 with a checkpoint every step until it is killed. With DATASET "-" it only starts
a run (what sweeps the temp files killed runs left) and exits."""

import os
import sys


def main(base, dataset, run_name):
    from eridiffusion.runtime import start_host

    start_host(base)
    import folder_paths
    import torch

    from devkit.tiny_models import build_tiny
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.data.dataset import load_dataset
    from eridiffusion.training.data.training_data import build_training_data
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.run_folder import unique_run_dir
    from eridiffusion.training.run.trainer import train_lora

    run_dir = unique_run_dir(folder_paths.get_output_directory(), run_name)
    if dataset == "-":
        os.rmdir(run_dir)
        return
    model, clip, vae = build_tiny("sd15", seed=0)
    with torch.inference_mode():
        data = build_training_data(load_dataset(dataset), vae, clip, 64, os.path.join(base, "cache"))
    config = TrainConfig(
        gradient_checkpointing=False,
        steps=100000,
        learning_rate=1e-3,
        dtype="fp32",
        save_every=1,
        keep_last=3,
        log_every=1,
        eval_images=1,
        eval_timesteps=1,
        run_name=run_name,
        adapter=AdapterSpec(rank=4, alpha=4.0, targets="all-linear"),
    )
    with torch.inference_mode(False):
        train_lora(model, data, config, run_dir)


if __name__ == "__main__":
    main(*sys.argv[1:4])
