"""Fixed-seed CPU training runs through the product's public entry points, to show a refactor changes
no number (issue 41). Each run trains 3-6 fp32 steps at batch 1 on 2 photos or 2 clips:

    graph    LoadDataset → CacheLatents → LoRATrainer → SaveLoRA through ComfyUI's executor (tiny SDXL)
    cli      `python -m eridiffusion train cfg.yaml` in a process of its own (tiny SD1.5)
    experts  two tiny Wan 2.2 experts in one run (TrainingObjective's low_noise_model), two SaveLoRAs
    resume   3 steps, then a run resumed from its checkpoint to 6, against 6 straight (tiny SD1.5)
    edit     tiny Qwen-Image-Edit on targets with two references each (control/, control_2/)
    audio    tiny ACE-Step 1.5 on two music clips (skipped on a host without its classes)

Prints one JSON object: each run's saved LoRA files (sha256 of their tensors: name, dtype, shape and
bytes in sorted key order, so the metadata's timestamps do not count), its losses and evaluation
losses (JSON floats, which Python writes as their repr: exact), and the host's ComfyUI and torch
versions. Two runs of the same code on the same machine print the same bytes; per-run seconds go to
stderr; the exit status is 1 when a run failed (its error is in the JSON).

    python bench/fixed_seed_runs.py [--only graph,cli,experts,resume,edit,audio] [--out FILE]
"""

import argparse
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# the CPU's reductions are summed in an order that depends on the thread count: one thread, here and
# in the command line's process, so the numbers do not depend on the machine's cores
for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[variable] = "1"

# the settings every run shares: tiny, fp32, fixed seed, batch 1, constant learning rate
TRAIN = {
    "steps": 4,
    "learning_rate": 3e-3,
    "rank": 4,
    "alpha": 4.0,
    "targets": "all-linear",
    "dtype": "fp32",
    "gradient_checkpointing": False,
    "batch_size": 1,
    "seed": 0,
    "lr_schedule": "constant",
    "warmup_steps": 0,
}
SAVE = {"dtype": "fp32"}


def tensors_sha256(path):
    """sha256 over a .safetensors file's tensors in sorted name order: each one's name, dtype, shape and
    stored bytes (the header's __metadata__ left out)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        start = 8 + size
        for name in sorted(k for k in header if k != "__metadata__"):
            entry = header[name]
            begin, end = entry["data_offsets"]
            f.seek(start + begin)
            digest.update(json.dumps([name, entry["dtype"], entry["shape"]]).encode())
            digest.update(f.read(end - begin))
    return digest.hexdigest()


def saved_files(base, run_dir, lora_prefix):
    """{path relative to `base`: tensors_sha256} of every .safetensors file of a run: its checkpoints,
    and SaveLoRA's files in base/loras whose path starts with `lora_prefix`."""
    hashes = {}
    for folder in (os.path.join(run_dir, "checkpoints"), os.path.join(base, "loras")):
        for where, _, names in os.walk(folder):
            for name in names:
                relative = os.path.relpath(os.path.join(where, name), base).replace(os.sep, "/")
                in_run = folder != os.path.join(base, "loras") or relative.startswith(f"loras/{lora_prefix}")
                if name.endswith(".safetensors") and in_run:
                    hashes[relative] = tensors_sha256(os.path.join(where, name))
    return dict(sorted(hashes.items()))


def read_json(path):
    with open(path) as f:
        return json.load(f)


EVAL_KEYS = ("eval_loss_before", "eval_loss_after", "stream_losses", "experts", "validation", "best_validation_loss")


def run_record(base, run_dir, lora_prefix):
    """What a finished run left: its LoRA files (SaveLoRA's and the checkpoints), losses and
    evaluation losses."""
    summary = read_json(os.path.join(run_dir, "summary.json"))
    loss_log = read_json(os.path.join(run_dir, "loss.json"))
    return {
        "files": saved_files(base, run_dir, lora_prefix),
        "losses": loss_log["loss"],
        "validation_losses": loss_log.get("validation", []),
        "eval": {key: summary[key] for key in EVAL_KEYS if summary.get(key) not in (None, [], {})},
    }


class Runs:
    """The runs, each in its own folders under ComfyUI's output and loras folders in `work`."""

    def __init__(self, work):
        import folder_paths

        from devkit import tiny_family_node
        from devkit.paths import shared_datasets
        from devkit.workflow import load_extension

        load_extension()
        tiny_family_node.register()
        self.work = work
        self.photos = os.path.join(shared_datasets(), "dreambooth_dog")
        self.output = folder_paths.get_output_directory()
        self.base = os.path.dirname(self.output)  # start_host's folder: output/ and loras/ in it

    def two_photos(self, name):
        folder = os.path.join(self.work, name)
        os.makedirs(folder)
        for stem in ("00", "01"):
            for ext in (".jpg", ".txt"):
                shutil.copy(os.path.join(self.photos, stem + ext), folder)
        return folder

    def execute(self, prompt, run_name, lora_prefix):
        """Run `prompt` through ComfyUI's executor; the run_record of run `run_name`."""
        from devkit.workflow import execution_error, run_prompt

        executor, _ = run_prompt(prompt)
        if not executor.success:
            raise RuntimeError(execution_error(executor))
        return run_record(self.base, os.path.join(self.output, run_name), lora_prefix)

    def prompt(self, dataset, run_name, stack, resolution, **options):
        from devkit.workflow import training_prompt

        settings = {**TRAIN, **options.pop("trainer", {}), "run_name": run_name}
        save = {**SAVE, "filename_prefix": f"fixed_seed/{run_name}"}
        cache = {**options.pop("cache_options", {})}
        cache.setdefault("cache_folder", os.path.join(self.work, run_name + "_cache"))
        return training_prompt(
            dataset, settings, save=save, stack=stack, resolution=resolution, cache_options=cache, **options
        )

    def family(self, name, seed=0):
        from devkit import tiny_family_node

        return {"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": name, "seed": seed}}

    def graph(self):
        """LoadDataset → CacheLatents → LoRATrainer → SaveLoRA on the tiny SDXL demo stack, 2 photos at 64 px."""
        stack = {"class_type": "EriDiffusion_TinyDemoModel", "inputs": {"architecture": "sdxl", "seed": 0}}
        prompt = self.prompt(self.two_photos("graph_photos"), "graph", stack, 64)
        return self.execute(prompt, "graph", "fixed_seed/graph")

    def cli(self):
        """`python -m eridiffusion train cfg.yaml --output OUT` (a process of its own) on the tiny SD1.5."""
        from devkit.headless import run_cli, write_yaml

        folder = os.path.join(self.work, "cli")
        os.makedirs(folder)
        train = {**TRAIN, "run_name": "cli"}
        config = {
            "model": "tiny-sd15",
            "dataset": {"folder": self.two_photos("cli_photos")},
            "cache": {"resolution": 64, "cache_folder": os.path.join(folder, "cache")},
            "train": train,
            "save": {**SAVE, "filename_prefix": "fixed_seed/cli"},
        }
        path = write_yaml(os.path.join(folder, "cfg.yaml"), json.dumps(config, indent=1))  # JSON is YAML
        output = os.path.join(folder, "out")
        done = run_cli("train", path, "--output", output, cwd=folder)
        if done.returncode != 0:
            raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
        return run_record(output, os.path.join(output, "cli"), "fixed_seed/cli")

    def clips(self, name):
        """Two clips of 16 frames panning over photos 00 and 01, as frame folders with their captions.
        Frame folders, not devkit's mp4 files: libx264 on several threads encodes the same frames into
        different files from one run to the next on this machine (its decoded frames differ too)."""
        from devkit.photo_clips import pan_and_zoom, write_frame_folder

        folder = os.path.join(self.work, name)
        for stem in ("00", "01"):
            write_frame_folder(os.path.join(folder, stem), pan_and_zoom(os.path.join(self.photos, stem + ".jpg"), 16))
            shutil.copy(os.path.join(self.photos, stem + ".txt"), folder)
        return folder

    def experts(self):
        """Two tiny Wan 2.1/2.2 experts (seeds 0 and 1) in one run, each LoRA saved by its own SaveLoRA,
        on two photo clips of 9 frames."""
        import nodes

        from devkit.photo_clips import CLIP_FRAMES
        from devkit.workflow import set_training_settings

        outputs = list(nodes.NODE_CLASS_MAPPINGS["EriDiffusion_LoRATrainer"].RETURN_NAMES)
        prompt = self.prompt(
            self.clips("experts_clips"),
            "experts",
            self.family("wan21_t2v", seed=0),
            64,
            dataset_options={"frames": CLIP_FRAMES, "fps": 16.0},
        )
        prompt["30"] = self.family("wan21_t2v", seed=1)
        prompt["5"]["inputs"]["filename_prefix"] = "fixed_seed/experts/lora_high_noise"
        prompt["31"] = {
            **prompt["5"],
            "inputs": {**prompt["5"]["inputs"], "lora": ["4", outputs.index("low_noise_lora")]},
        }
        prompt["31"]["inputs"]["filename_prefix"] = "fixed_seed/experts/lora_low_noise"
        # the second expert, its own seed, on TrainingObjective (node 32)
        set_training_settings(prompt, {"low_noise_model": ["30", 0]})
        return self.execute(prompt, "experts", "fixed_seed/experts")

    def resume(self):
        """Tiny SD1.5: 3 steps, then a second run resumed from its checkpoint to 6, against 6 straight."""
        stack = {"class_type": "EriDiffusion_TinyDemoModel", "inputs": {"architecture": "sd15", "seed": 0}}
        photos = self.two_photos("resume_photos")
        records = {
            "straight_6": self.execute(
                self.prompt(photos, "resume_straight", stack, 64, trainer={"steps": 6}),
                "resume_straight",
                "fixed_seed/resume_straight",
            ),
            "first_3": self.execute(
                self.prompt(photos, "resume_first", stack, 64, trainer={"steps": 3}),
                "resume_first",
                "fixed_seed/resume_first",
            ),
        }
        checkpoint = os.path.join(self.output, "resume_first", "checkpoints", "resume_first_step000003.safetensors")
        records["resumed_to_6"] = self.execute(
            self.prompt(photos, "resume_resumed", stack, 64, trainer={"steps": 6}, resume=checkpoint),
            "resume_resumed",
            "fixed_seed/resume_resumed",
        )
        saved = [
            records[name]["files"][f"loras/fixed_seed/{run}.safetensors"]
            for name, run in (("straight_6", "resume_straight"), ("resumed_to_6", "resume_resumed"))
        ]
        records["resumed_equals_straight"] = saved[0] == saved[1] and (
            records["straight_6"]["losses"] == records["resumed_to_6"]["losses"]
        )
        return records

    def edit(self):
        """Tiny Qwen-Image-Edit on 2 targets, each with 2 references (control/, control_2/)."""
        from devkit.edit_pairs import make_edit_pairs

        pairs = make_edit_pairs(self.photos, os.path.join(self.work, "edit_pairs"), ("00", "01"), 2)
        prompt = self.prompt(pairs, "edit", self.family("qwen_image_edit"), 64)
        return self.execute(prompt, "edit", "fixed_seed/edit")

    def audio(self):
        """Tiny ACE-Step 1.5 on two synthesized music clips (wav: no lossy encoder between runs). Its audio
        VAE encodes by drawing from torch's global generator (ComfyUI's VAEBottleneck), which main()
        seeds before each run."""
        from devkit.music_clips import music_dataset
        from devkit.tiny_models import TINY_FAMILIES

        music = music_dataset(os.path.join(self.work, "audio_music"), per_style=1)
        seconds = TINY_FAMILIES["ace_step15"].audio_seconds
        prompt = self.prompt(music, "audio", self.family("ace_step15"), 64, dataset_options={"seconds": seconds})
        return self.execute(prompt, "audio", "fixed_seed/audio")


def seed_global_generators():
    """Seed torch's, Python's and NumPy's global generators: torch seeds its own differently in every
    process (2.11), and a run's data may draw from it (the audio VAE's encode); seeded before each run,
    a run's numbers depend neither on the process nor on the runs before it (--only)."""
    import random

    import numpy
    import torch

    torch.manual_seed(0)
    random.seed(0)
    numpy.random.seed(0)


RUNS = ("graph", "cli", "experts", "resume", "edit", "audio")
NEEDS = {"experts": "wan21_t2v", "edit": "qwen_image_edit", "audio": "ace_step15"}  # the tiny families they build


def main(argv=None):
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--only", help=f"comma-separated runs of {','.join(RUNS)} (default: all)")
    options.add_argument("--out", help="also write the JSON to this file")
    args = options.parse_args(argv)
    names = args.only.split(",") if args.only else list(RUNS)
    unknown = [name for name in names if name not in RUNS]
    if unknown:
        options.error(f"unknown run(s) {unknown}: choose from {','.join(RUNS)}")

    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-fixed-seed-")
    import torch

    torch.set_num_threads(1)
    from devkit.tiny_models import TINY_FAMILIES
    from eridiffusion.comfy_compat import host_version

    runs = Runs(tempfile.mkdtemp(prefix="eridiffusion-fixed-seed-data-"))
    results = {"comfyui": host_version(), "torch": torch.__version__, "runs": {}}
    failed = False
    for name in names:
        missing = TINY_FAMILIES[NEEDS[name]].missing_on_host() if name in NEEDS else []
        started = time.perf_counter()
        seed_global_generators()
        if missing:
            results["runs"][name] = {"skipped": f"ComfyUI {host_version()} has no {', '.join(missing)}"}
        else:
            try:
                results["runs"][name] = getattr(runs, name)()
            except Exception as error:  # recorded, and the exit status says so: the other runs still run
                results["runs"][name] = {"error": f"{type(error).__name__}: {error}"}
                failed = True
        print(f"{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    text = json.dumps(results, indent=1, sort_keys=True)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    shutil.rmtree(runs.work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
