"""Full fine-tunes of the tiny FLUX.1 [dev] with their weights sharded over torchrun's processes (sharding
fsdp) beside one process at the same global batch: what tests/training/trained/test_sharded.py compares.

    python -m torch.distributed.run --standalone --nproc_per_node=2 -m devkit.sharded_runs OUT

runs, in every process: a sharded run of STEPS steps (a checkpoint every STEPS // 2), then a sharded
run resumed from that middle checkpoint (a checkpoint every STEPS // 4, keep_last 1); then rank 0 alone
the same run in one process at twice the batch, unsharded. Rank 0 writes OUT/runs.json: each run's
losses, gradient norms, evaluation losses, checkpoints and trained tensors' names."""

import dataclasses
import json
import os
import sys

STEPS = 12
BATCH = 1  # per process of the sharded runs; the one-process run takes world size x this
RESOLUTION = 64


def fine_tune(steps=STEPS, batch_size=BATCH, **values):
    """The fp32 AdamW fine-tune of the tiny Flux's double blocks' attention, checkpointed halfway."""
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.run.config import TrainConfig

    settings = dict(
        steps=steps,
        learning_rate=1e-3,
        dtype="fp32",
        seed=3,
        batch_size=batch_size,
        log_every=1,
        save_every=steps // 2,
        validate_every=steps // 2,
        gradient_checkpointing=True,
        run_name="sharded",
        adapter=AdapterSpec(algorithm="full", targets="attention", include="double_blocks"),
        eval_images=2,
        eval_timesteps=2,
    )
    return TrainConfig(**{**settings, **values})


def tiny_flux_data(processes):
    """The tiny FLUX.1 [dev] ModelPatcher and the dog photos encoded at RESOLUTION (a cache per process), one
    of the five held out for validation."""
    import tempfile

    import torch

    from devkit.paths import shared_datasets
    from devkit.tiny_flux import tiny_flux_dev
    from eridiffusion.training.data.dataset import load_dataset
    from eridiffusion.training.data.training_data import build_training_data

    model, clip, vae = tiny_flux_dev(seed=0)
    dataset = load_dataset(os.path.join(shared_datasets(), "dreambooth_dog"), validation=0.2)
    with torch.inference_mode():
        data = build_training_data(dataset, vae, clip, RESOLUTION, tempfile.mkdtemp(prefix="sharded-cache-"))
    return model, data


def recorded_norms():
    """A list that gets the gradient norm of each optimizer step from now on (the step's gradient_norm, seen
    from outside): what tells averaged gradients from summed ones, which AdamW's updates do not (they divide
    the gradients' scale out)."""
    from eridiffusion.training.run import optimizer_step

    norms, own = [], optimizer_step.gradient_norm

    def recording(parameters, max_norm):
        norm = own(parameters, max_norm)
        norms.append(norm)
        return norm

    optimizer_step.gradient_norm = recording
    return norms


def summary(result, norms):
    """A run's figures for runs.json (`norms`: its steps' gradient norms, taken out of the list)."""
    taken = [float(norm) for norm in norms]
    norms.clear()
    return {
        "losses": result.losses,
        "gradient_norms": taken,
        "eval_loss_before": result.eval_loss_before,
        "eval_loss_after": result.eval_loss_after,
        "validation": result.validation,
        "best": result.best,
        "checkpoints": result.checkpoints,
        "trained": sorted(result.trained.named_tensors()),
    }


def main(out):
    from eridiffusion.training.run.distributed import SINGLE_PROCESS, join_processes

    processes = join_processes()  # (before ComfyUI is imported)
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("sharded-runs-")
    import torch

    from eridiffusion.training.run.precision import PrecisionSpec
    from eridiffusion.training.run.resume import load_resume_point
    from eridiffusion.training.run.trainer import train_lora

    model, data = tiny_flux_data(processes)
    runs, norms = {}, recorded_norms()
    with torch.inference_mode(False):
        sharded = fine_tune(precision=PrecisionSpec(sharding="fsdp"))
        whole = train_lora(model, data, sharded, os.path.join(out, "sharded"), processes=processes)
        runs["sharded"] = summary(whole, norms)
        middle = load_resume_point(whole.checkpoints[0])
        often = dataclasses.replace(sharded, save_every=STEPS // 4, keep_last=1)  # (free to change on resume)
        resumed = train_lora(model, data, often, os.path.join(out, "resumed"), resume=middle, processes=processes)
        runs["resumed"] = summary(resumed, norms)
        if processes.is_main:
            one = fine_tune(batch_size=BATCH * processes.world_size)
            alone = train_lora(model, data, one, os.path.join(out, "one"), processes=SINGLE_PROCESS)
            runs["one"] = summary(alone, norms)
            with open(os.path.join(out, "runs.json"), "w") as f:
                json.dump(runs, f)
    processes.barrier()
    processes.close()


if __name__ == "__main__":
    main(sys.argv[1])
