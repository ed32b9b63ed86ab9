"""The demo: trains a LoRA on the DreamBooth dog photos by running example_workflows/sdxl_lora.json
through ComfyUI's own executor, with the checkpoint loader swapped for a tiny random-weight SDXL
(or for a real checkpoint given as CKPT=/path/to/model.safetensors), then prints what it wrote.

    python -m demo.run_demo [--out runs/demo] [--steps N]
"""

import argparse
import glob
import json
import os
import shutil
import sys
import time

from devkit.paths import ROOT, shared_datasets
from eridiffusion.runtime import start_host


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        default=os.path.join(ROOT, "runs", "demo"),
        help="folder for ComfyUI's output/input/loras of this run (emptied first)",
    )
    parser.add_argument("--steps", type=int, default=None, help="training steps (tiny model: 200)")
    return parser.parse_args(argv)


def demo_prompt(ckpt, steps, dataset_dir, example="sdxl_lora.json", size=256):
    """An example workflow as an API prompt, sized for a CPU (tiny model of the example's
    architecture) or for a real checkpoint (CKPT)."""
    from devkit.example_workflows import load_example
    from devkit.workflow import set_training_settings, substitute, ui_to_api

    prompt = ui_to_api(load_example(example))
    if ckpt:
        import folder_paths

        folder_paths.add_model_folder_path("checkpoints", os.path.dirname(os.path.abspath(ckpt)), is_default=True)
        prompt = substitute(
            prompt,
            overrides={
                "CheckpointLoaderSimple": {"ckpt_name": os.path.basename(ckpt)},
                "EriDiffusion_LoadDataset": {"folder": dataset_dir},
            },
        )
        return set_training_settings(prompt, {"steps": steps or 500})
    architecture = "sdxl" if example.startswith("tiny") else example.split("_")[0]
    prompt = substitute(
        prompt,
        replacements={
            "CheckpointLoaderSimple": ("EriDiffusion_TinyDemoModel", {"architecture": architecture, "seed": 0})
        },
        overrides={
            "EriDiffusion_LoadDataset": {"folder": dataset_dir},
            "EriDiffusion_CacheLatents": {"resolution": size},
            "EriDiffusion_SampleDuringTraining": {"width": size, "height": size, "steps": 8, "every": 40, "cfg": 4.0},
            "EmptyLatentImage": {"width": size, "height": size},
            "KSampler": {"steps": 8, "cfg": 4.0},
        },
    )
    return set_training_settings(
        prompt,
        {
            "steps": steps or 200,
            "learning_rate": 3e-3,
            "dtype": "fp32",
            "targets": "all-linear",
            "rank": 8,
            "alpha": 8.0,
            "gradient_checkpointing": False,
        },
    )


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    shutil.rmtree(args.out, ignore_errors=True)
    start_host(args.out)
    from devkit.workflow import execution_error, load_extension, run_prompt

    load_extension()
    dataset_dir = os.path.join(shared_datasets(), "dreambooth_dog")
    ckpt = os.environ.get("CKPT")
    model_label = ckpt or "tiny random-weight SDXL (ComfyUI's SDXL class, shrunk)"
    print(f"[demo] training on {dataset_dir} with {model_label}", flush=True)
    started = time.time()
    executor, _ = run_prompt(demo_prompt(ckpt, args.steps, dataset_dir))
    if not executor.success:
        print(f"[demo] failed: {execution_error(executor)}", file=sys.stderr)
        return 1
    import folder_paths

    output = folder_paths.get_output_directory()
    run_dir = os.path.join(output, "sks_dog")
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    loras = sorted(
        glob.glob(os.path.join(folder_paths.get_folder_paths("loras")[0], "**", "*.safetensors"), recursive=True)
    )
    print(
        f"[demo] done in {time.time() - started:.0f} s: {summary['steps']} steps, "
        f"{summary['seconds_per_step']:.3f} s/step"
    )
    print(
        f"[demo] evaluation loss {summary['eval_loss_before']:.4f} -> {summary['eval_loss_after']:.4f} "
        f"({100 * (1 - summary['eval_loss_after'] / summary['eval_loss_before']):.0f}% lower); "
        f"training loss first step {summary['first_loss']:.4f}, last step {summary['last_loss']:.4f}"
    )
    print(f"[demo] LoRA:        {', '.join(loras)}")
    print(f"[demo] samples:     {', '.join(summary['samples'])}")
    print(f"[demo] loss plot:   {os.path.join(run_dir, 'loss.png')}")
    print(f"[demo] test image:  {', '.join(sorted(glob.glob(os.path.join(output, 'eridiffusion', '*.png'))))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
