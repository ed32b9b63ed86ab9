"""musubi-tuner's block swap on the work of bench/memory_frontier.py's Wan rows, for a side-by-side
with ours on the same machine: Wan 2.1 14B text-to-video, random weights (bench/train_speed.py's
file, ComfyUI's keys, which musubi's loader takes as they are), 480p clips of 33 frames (832x480),
batch 1, LoRA rank 16 on every Linear of the blocks (networks.lora_wan), bf16, gradient checkpointing,
SDPA, AdamW 1e-4, seed 0.

musubi-tuner trains from its caches: this writes one random latent cache and one random T5 cache in
its file format (so no VAE or T5 weights are needed) and the dataset TOML into a temp folder, then
runs its wan_train_network as a process of its own per experiment. Inside that process, before
musubi's main runs (runpy), the GPU memory is capped (torch.cuda.set_per_process_memory_fraction, as
a card of that size) and musubi's own per-step hooks (NetworkTrainer.on_train_start and
on_post_optimizer_step) are wrapped to take the time after each optimizer step (after a device
synchronize; musubi reads the loss back every step anyway) and the peak memory over the steps
(torch.cuda.max_memory_allocated, reset when training starts). s/step is the median of the step
intervals after WARMUP steps; musubi's own progress bar's s/it is kept beside it as a check (its
average counts the first step but not its time). Prints `RESULT {json}` per experiment and writes
$OUT/musubi_block_swap.json (each experiment's output in $OUT/musubi_block_swap_<exp>.log).

Experiments (PLAN, comma-separated): swapN (--blocks_to_swap N; 0 or absent: none), capN (the process
may use N GiB; absent: uncapped), h2d (--block_swap_h2d_only), pinned
(--use_pinned_memory_for_block_swap), ringN (--block_swap_ring_size N), fp8 (--fp8_base: float8_e4m3fn
base weights), fp8scaled (--fp8_base --fp8_scaled). STEPS (14) and WARMUP (4)
set the steps; TIMEOUT_S (300) stops one experiment.

musubi-tuner and the packages it needs beyond the GPU machine's image travel in the git-ignored
.musubi/ (about 7 MB): its source from the fetch tool's bare mirror, and wheels that this script
installs into a folder of their own (so they never enter the image's packages that our benchmarks
use). Here, once, in the repository root:

    M=/work/.mirror/kohya-ss+musubi-tuner/repo
    git --git-dir=$M archive --format=tar --prefix=.musubi/ HEAD src/musubi_tuner | tar -x
    git --git-dir=$M rev-parse HEAD > .musubi/COMMIT
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .musubi/wheels \\
        diffusers==0.32.1 easydict==1.13 ftfy==6.3.1 wcwidth==0.2.13 voluptuous==0.15.2 toml==0.10.2

On the GPU machine (carry .whl and .musubi; ComfyUI is needed only to write the weights file, once
per machine, unless an earlier benchmark left it in the temp folder):

    MUSUBI=.musubi PLAN=cap24_swap24,cap16_swap35 bash bench/gpu_host.sh python3 bench/musubi_block_swap.py
"""

import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import peer_runs  # noqa: E402

# The work, as bench/train_speed.py's Wan rows train it
WIDTH, HEIGHT, FRAMES, RANK = 832, 480, 33, 16
TEXT_TOKENS, TEXT_WIDTH, LATENT_CHANNELS = 512, 4096, 16  # umt5-xxl's output; Wan's VAE
# EriDiffusion's budget put 24 (24 GiB) and 35 (16 GiB) of the 40 blocks in its ring (docs/speed.md)
DEFAULT_PLAN = "cap24_swap24,cap24_swap24_h2d,cap16_swap35,cap16_swap35_h2d"
# What musubi-tuner imports beyond what the GPU machine's image holds (src/musubi_tuner's module-level
# imports on wan_train_network's path); av is bench/pyav_stand_in's.
MUSUBI_NEEDS = (
    "diffusers easydict ftfy voluptuous toml cv2 einops accelerate transformers safetensors PIL torchvision regex"
    " huggingface_hub"
).split()


def musubi_paths(root):
    """(the folder holding musubi_tuner, the commit it was exported at) of a MUSUBI tree."""
    for src in (os.path.join(root, "src"), root):
        if os.path.isfile(os.path.join(src, "musubi_tuner", "wan_train_network.py")):
            return src, peer_runs.exported_commit(root)
    raise SystemExit(
        f"MUSUBI={root}: no src/musubi_tuner/wan_train_network.py there; export musubi-tuner's "
        "tree as this file's docstring says and carry it"
    )


def write_dataset(folder, width=WIDTH, height=HEIGHT, frames=FRAMES, repeats=1):
    """One clip's caches in musubi's format (dataset/cache_io.py, read back by dataset/bucket.py) and the dataset
    TOML over them; the clip repeats `repeats` times per epoch, so that one epoch holds every step. Returns the
    TOML's path."""
    import safetensors.torch
    import torch

    generator = torch.Generator().manual_seed(0)
    cache, videos = os.path.join(folder, "cache"), os.path.join(folder, "videos")
    os.makedirs(cache, exist_ok=True)
    os.makedirs(videos, exist_ok=True)  # musubi's video dataset wants a source folder; from caches it stays empty
    # latents (C, F, H, W) as Wan's VAE gives them (stride 4 in time, 8 in space), keyed latents_FxHxW_<dtype>;
    # the name says where the clip came from: <item>_<first frame>-<frames>_<width>x<height>_wan
    latent = torch.randn(LATENT_CHANNELS, (frames - 1) // 4 + 1, height // 8, width // 8, generator=generator)
    _, f, h, w = latent.shape
    safetensors.torch.save_file(
        {f"latents_{f}x{h}x{w}_bfloat16": latent.to(torch.bfloat16)},
        os.path.join(cache, f"clip_00000-{frames:03d}_{width:04d}x{height:04d}_wan.safetensors"),
        metadata={
            "architecture": "wan",
            "width": str(width),
            "height": str(height),
            "frame_count": str(frames),
            "format_version": "1.0.1",
        },
    )
    # T5's states, one row per token (musubi pads them to 512 in the model), as train_speed.conditioning draws them
    text = torch.randn(TEXT_TOKENS, TEXT_WIDTH, generator=generator) * 0.5
    safetensors.torch.save_file(
        {"varlen_t5_bfloat16": text.to(torch.bfloat16)},
        os.path.join(cache, "clip_wan_te.safetensors"),
        metadata={"architecture": "wan", "caption1": "a random clip", "format_version": "1.0.1"},
    )
    toml_path = os.path.join(folder, "dataset.toml")
    with open(toml_path, "w") as f:
        f.write(
            "[general]\n"
            f"resolution = [{width}, {height}]\n"
            "batch_size = 1\n"
            "enable_bucket = false\n\n"
            "[[datasets]]\n"
            f'video_directory = "{videos}"\n'
            f'cache_directory = "{cache}"\n'
            f"target_frames = [{frames}]\n"
            'frame_extraction = "head"\n'
            f"num_repeats = {repeats}\n"
        )
    return toml_path


def musubi_argv(
    dit, dataset_toml, output_dir, steps, swap=0, h2d=False, pinned=False, ring=None, fp8=None, task="t2v-14B"
):
    """wan_train_network's arguments for this work."""
    options = {
        "task": task,
        "dit": dit,
        "dataset_config": dataset_toml,
        "sdpa": True,
        "mixed_precision": "bf16",
        "gradient_checkpointing": True,
        "network_module": "networks.lora_wan",
        "network_dim": RANK,
        "network_alpha": RANK,
        "optimizer_type": "AdamW",
        "learning_rate": 1e-4,
        "timestep_sampling": "shift",
        "discrete_flow_shift": 3.0,
        "max_train_steps": steps,
        "seed": 0,
        "max_data_loader_n_workers": 2,
        "persistent_data_loader_workers": True,
        "output_dir": output_dir,
        "output_name": "musubi_bench",
        "blocks_to_swap": swap or None,
        "block_swap_h2d_only": h2d,
        "use_pinned_memory_for_block_swap": pinned,
        "block_swap_ring_size": ring,
        "fp8_base": fp8 is not None,
        "fp8_scaled": fp8 == "scaled",
    }
    return peer_runs.command_line(options)


def run_capped(cap_gib, record_path, argv):
    """In musubi's own process: cap the GPU's memory, time musubi's steps through its hooks, run its Wan trainer."""
    import runpy

    from bench.train_speed import stub_pyav

    stub_pyav()  # musubi imports PyAV at module level; the image lacks it and caches need no video
    record = peer_runs.StepRecord(record_path, cap_gib)
    from musubi_tuner.training.trainer_base import NetworkTrainer

    train_start, post_step = NetworkTrainer.on_train_start, NetworkTrainer.on_post_optimizer_step

    def on_train_start(self, *args, **kwargs):
        train_start(self, *args, **kwargs)
        record.training_started()

    def on_post_optimizer_step(self, *args, **kwargs):
        post_step(self, *args, **kwargs)
        record.step_ended()

    NetworkTrainer.on_train_start, NetworkTrainer.on_post_optimizer_step = on_train_start, on_post_optimizer_step
    sys.argv = ["wan_train_network.py", *argv]
    runpy.run_module("musubi_tuner.wan_train_network", run_name="__main__", alter_sys=True)


def experiment(name):
    """An experiment's memory cap in GiB (None: uncapped) and its block swap settings (this file's docstring)."""
    parts = name.split("_")
    number = lambda prefix, kind: peer_runs.experiment_number(parts, prefix, kind)
    swap = {"swap": number("swap", int) or 0, "h2d": "h2d" in parts, "pinned": "pinned" in parts}
    fp8 = "scaled" if "fp8scaled" in parts else "plain" if "fp8" in parts else None
    return number("cap", float), {**swap, "ring": number("ring", int), "fp8": fp8}


def run_experiment(name, dit, dataset_toml, folder, paths, steps, warmup, timeout_s, out_dir):
    """musubi's training under one experiment's settings, in a process of its own; its figures."""
    cap, swap = experiment(name)
    record_path = os.path.join(folder, f"{name}.json")
    argv = musubi_argv(dit, dataset_toml, os.path.join(folder, "output"), steps, **swap)
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        HF_HUB_OFFLINE="1",  # nothing here needs the hub; the GPU machine cannot reach it
        PYTHONPATH=os.pathsep.join([*paths, ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    command = [sys.executable, os.path.abspath(__file__), "--in-musubi", str(cap or 0), record_path, "--", *argv]
    log_path = os.path.join(out_dir, f"musubi_block_swap_{name}.log")
    run = peer_runs.run_peer(command, env, folder, log_path, timeout_s, record_path)
    return {
        "exp": name,
        "trainer": "musubi-tuner",
        "model": "wan",
        "grad_ckpt": True,
        "resolution": HEIGHT,
        "width": WIDTH,
        "frames": FRAMES,
        "batch": 1,
        "rank": RANK,
        "blocks_to_swap": swap["swap"],
        "h2d_only": swap["h2d"],
        "pinned": swap["pinned"],
        "ring_size": swap["ring"],
        "fp8": swap["fp8"],
        "memory_cap_GiB": cap,
        **run.measured(),
        "wall_s": run.wall_s,
        "log": os.path.basename(log_path),
        **run.speed(warmup, "clips_per_s"),
    }


def main():
    musubi_root = peer_runs.peer_root("MUSUBI", "musubi-tuner")
    src, commit = musubi_paths(musubi_root)
    site = peer_runs.peer_site(musubi_root, "musubi")
    paths = [src, *([site] if site else [])]
    peer_runs.check_imports(paths, MUSUBI_NEEDS, "musubi-tuner", "MUSUBI")
    plan, steps, warmup, timeout_s, out_dir = peer_runs.plan_settings(DEFAULT_PLAN, default_timeout_s=300)
    dit = peer_runs.random_weights_file("wan")  # musubi's WanModel has the same 1095 keys and shapes

    import torch

    header = {
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "musubi_commit": commit,
        "commit": os.environ.get("COMMIT"),
        "dit": dit,
        "steps": steps,
        "warmup": warmup,
    }
    results = []
    with tempfile.TemporaryDirectory(prefix="musubi-bench-") as folder:
        dataset_toml = write_dataset(folder, repeats=steps + 2)
        for name in plan:
            r = run_experiment(name, dit, dataset_toml, folder, paths, steps, warmup, timeout_s, out_dir)
            r["musubi_commit"] = commit
            peer_runs.report(r, results, header, os.path.join(out_dir, "musubi_block_swap.json"))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--in-musubi"]:  # the process run_experiment starts: cap GiB, record file, --, musubi's argv
        run_capped(float(sys.argv[2]) or None, sys.argv[3], sys.argv[5:])
    else:
        main()
