"""Fixed-seed runs of the trainer's features on tiny stacks (CPU), their losses, evaluation and
validation losses and trained tensors written as JSON: a refactor that changes no numbers leaves
the file identical. Compare two files with --compare.

    .venv/bin/python scripts/loss_fingerprint.py after.json [--compare before.json]
"""

import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from eridiffusion.runtime import start_host_in_temp_dir  # noqa: E402

# (name, settings, data): each a short run of tiny SDXL (unless `arch` says otherwise) on 3 photos at 64²
CASES = {
    "lora_fp32": {},
    "dora": {"algorithm": "dora"},
    "lokr": {"algorithm": "lokr", "learning_rate": 1e-2},
    "loha": {"algorithm": "loha"},
    "locon": {"conv_rank": 4, "conv_alpha": 4.0, "targets": "all-linear"},
    "bf16_checkpointing": {"dtype": "bf16", "gradient_checkpointing": True},
    "accumulation_batch": {"grad_accum": 2, "batch_size": 2},
    "cosine_warmup_block_lr": {"lr_schedule": "cosine", "warmup_steps": 2, "block_lr": "input:0.5,output:2"},
    "ema_validation_folder": {"ema_decay": 0.9, "ema_warmup": 2, "validate_every": 2, "data": {"val": "cat"}},
    "held_out_early_stop": {"validate_every": 1, "early_stop_patience": 1, "data": {"images": 4, "validation": 0.4}},
    "text_encoder": {"text_encoder_lr": 1e-3},
    "preservation": {"preservation_prompt": "a photo of dog", "preservation_every": 2},
    "prior": {"prior_weight": 0.5, "data": {"reg": "cat"}},
    "dropout_shuffle": {"data": {"caption_dropout": 0.3, "shuffle_tags": True}},
    "flip": {"data": {"flip": True}},
    "skip_non_finite_lion": {"on_nan": "skip", "max_grad_norm": 0.0, "optimizer": "Lion"},
    "sd15_objective": {"arch": "sd15", "timestep_sampling": "logit_normal", "loss_weighting": "min_snr"},
    "save_every_keep_last": {"save_every": 2, "keep_last": 2},
    "flux_dev": {"arch": "flux_dev"},
}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--compare", help="an earlier output: print the largest difference and exit 1 if any")
    args = parser.parse_args()
    start_host_in_temp_dir("eridiffusion-fingerprint-")
    results = {name: run_case(name, dict(values)) for name, values in CASES.items()}
    for summary in results.values():
        summary.pop("first_checkpoint")
    results["resumed"] = resumed()
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    if args.compare:
        with open(args.compare) as f:
            differences = differences_of(json.load(f), results, "")
        print(json.dumps({"cases": len(results), "differences": differences[:20]}, indent=1))
        sys.exit(1 if differences else 0)


WORK = tempfile.mkdtemp(prefix="eridiffusion-fingerprint-")


def training_data(arch, images=3, val=None, reg=None, **load):
    import torch

    from devkit.paths import shared_datasets
    from devkit.tiny_models import build_tiny
    from eridiffusion.training.data.dataset import load_dataset
    from eridiffusion.training.data.training_data import build_training_data

    def folder(name):
        return load_dataset(os.path.join(shared_datasets(), f"dreambooth_{name}"))

    model, clip, vae = build_tiny(arch, seed=0)
    dataset = load_dataset(os.path.join(shared_datasets(), "dreambooth_dog"), **load)
    extra = {"validation_dataset": folder(val) if val else None, "regularization_dataset": folder(reg) if reg else None}
    with torch.inference_mode():
        data = build_training_data(dataset, vae, clip, 64, os.path.join(WORK, "cache"), **extra)
    data.samples = data.samples[:images]
    return model, clip, data


def run_case(name, values, resume=None, steps=6):
    from eridiffusion.training.run.config import train_config_from
    from eridiffusion.training.run.resume import load_resume_point
    from eridiffusion.training.run.trainer import train_lora

    model, clip, data = training_data(values.pop("arch", "sdxl"), **values.pop("data", {}))
    settings = {"steps": steps, "learning_rate": 3e-3, "dtype": "fp32", "gradient_checkpointing": False}
    config = train_config_from({**settings, "run_name": name, **values})
    run_dir = os.path.join(WORK, name)
    os.makedirs(run_dir, exist_ok=True)
    point = load_resume_point(resume) if resume else None
    result = train_lora(model, data, config, run_dir, clip=clip, resume=point)
    return {
        "losses": result.losses,
        "evaluation": [result.eval_loss_before, result.eval_loss_after],
        "validation": result.validation,
        "checkpoints": [os.path.basename(c) for c in result.checkpoints],
        "tensor_abs_sum": float(sum(t.double().abs().sum() for t in result.lora.tensors.values())),
        "first_checkpoint": result.checkpoints[0] if result.checkpoints else None,
    }


def resumed():
    """6 steps in one run, and 3 + 3 continued from the step-3 checkpoint: the same losses."""
    whole = run_case("resumed", {"save_every": 3})
    continued = run_case("resumed", {"save_every": 3}, resume=whole.pop("first_checkpoint"))
    continued.pop("first_checkpoint")
    return {"whole": whole, "continued": continued}


def differences_of(a, b, path, tolerance=1e-6):
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences_of(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences_of(x, y, f"{path}[{i}]")]
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool):
        return [] if abs(a - b) <= tolerance else [f"{path}: {a} != {b}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


if __name__ == "__main__":
    main()
