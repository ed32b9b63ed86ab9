"""Training on 1 GPU against 2 (or more): images per second and peak memory per GPU of full-size SDXL
or Flux.1-dev with random weights (bench/train_speed.py builds and saves them once), rank 16,
1024², bf16, CUDA graphs on where the setting allows, each experiment a torchrun of its own (the
launch `eridiffusion train --gpus N` does). Also two checks: 2 GPUs x batch 1 against 1 GPU x
batch 2 (the same global batch: the losses agree to bf16 precision), and the node path's `device`
choice (training on cuda:1 leaves cuda:0 untouched). Prints one `RESULT {json}` line per experiment
and the summary as JSON; writes $OUT/multi_gpu.json.

    COMFYUI_PATH=... python bench/multi_gpu.py                    # PLAN=1x1,2x1,1x2 MODEL=sdxl
    PLAN=1x1,2x1,4x1 MODEL=flux CKPT=1 python bench/multi_gpu.py
    PLAN=device python bench/multi_gpu.py                         # the node path on cuda:1
    WEIGHTS=fp8 STREAM_GIB=6 MODEL=flux python bench/multi_gpu.py # fp8 base weights, streamed weights
    MODEL=tiny PLAN=1x1,2x1 python bench/multi_gpu.py            # CPU smoke run: tiny SDXL, gloo
    ALGORITHM=full SHARDING=fsdp MODEL=flux PLAN=1x1,2x1 python bench/multi_gpu.py  # full fine-tune, FSDP2
    python bench/multi_gpu.py --plan                              # print the commands, run nothing

ALGORITHM=full trains the model's own weights with AdamW (TARGETS, default all-linear, and INCLUDE choose
them), and SHARDING=fsdp splits them over the processes of each experiment of 2 or more (sharding: fsdp;
one process trains them whole). A sharded run holds fp32 weights with AdamW (all FSDP runs with), 16 bytes
a weight: Flux.1-dev's whole fine-tune does not fit one GPU so. SINGLE=fit gives the experiments of one
process the settings a one-GPU fine-tune fits with (Adafactor, bf16 weights with stochastic rounding, the
fused backward: 4 bytes a weight), the baseline the sharded experiments are compared against.
An experiment GxB is G processes (GPUs) x batch B per process;
images/s = G x B / (s/step), s/step the median of CUDA-event times between steps after WARMUP steps,
measured on every rank. PROFILE=1 writes torch.profiler's tables of two steps after the warm-up of each
experiment's rank 0 ($OUT/profile_GxB.txt: by device time, by host time, and the kernels' time, NCCL's
beside the rest).
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

STEPS = int(os.environ.get("STEPS", "14"))
WARMUP = int(os.environ.get("WARMUP", "4"))


def experiments(plan):
    """[(name, processes, batch per process)] of PLAN entries GxB; 'device' is the node-path check."""
    found = []
    for item in (p.strip() for p in plan.split(",") if p.strip()):
        if item == "device":
            found.append((item, 1, 1))
            continue
        processes, batch = (int(n) for n in item.split("x"))
        found.append((item, processes, batch))
    return found


def worker_command(name, processes):
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={processes}",
        os.path.abspath(__file__),
        "--worker",
        name,
    ]


def first_error(stderr):
    """The first exception a worker raised (its line and the three before), not torchrun's report of the failed
    child that ends the output."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^[\w.]*(Error|Exception)\b", line) and "ChildFailedError" not in line:
            return "\n".join(lines[max(0, i - 3) : i + 1])
    return stderr[-2000:]


def comparisons(results):
    """Speed-up of each GxB over 1xB (one process at the same batch) and its scaling efficiency, and 2x1
    against 1x2's losses."""
    by = {r["exp"]: r for r in results if "s_per_step" in r}
    out = {}
    for name, r in by.items():
        base = by.get(f"1x{r['batch_per_process']}")
        if base is not None and r["processes"] > 1:
            speedup = r["images_per_s"] / base["images_per_s"]
            out[f"{name}_vs_{base['exp']}"] = {
                "speedup": round(speedup, 3),
                "scaling_efficiency": round(speedup / r["processes"], 3),
                "peak_GiB_per_gpu": r["peak_GiB_per_process"],
                f"peak_GiB_{base['exp']}": base["peak_GiB_per_process"],
            }
    if "2x1" in by and "1x2" in by:
        a, b = by["2x1"]["losses"], by["1x2"]["losses"]
        out["2x1_vs_1x2_max_loss_difference"] = max(abs(x - y) for x, y in zip(a, b))
    return out


class StepProfiler:
    """torch.profiler over the two steps after the warm-up, its tables written to $OUT/profile_{name}.txt."""

    def __init__(self, name):
        import torch

        self.name, self.first = name, WARMUP + 1
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profile = torch.profiler.profile(activities=activities)

    def at_step(self, step):
        """Called as step `step` ends: starts before the first profiled step, stops after the second."""
        if step == self.first - 1:
            self.profile.start()
        elif step == self.first + 1:
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.profile.stop()
            self.write()

    def write(self):
        events = self.profile.key_averages()
        device_key = "device_time_total" if hasattr(events[0], "device_time_total") else "cuda_time_total"
        busy = {"nccl": 0.0, "other": 0.0}  # the kernels' own time (ms), NCCL's beside the rest
        for e in events:
            if e.device_type.name == "CUDA":
                busy["nccl" if "nccl" in e.key.lower() else "other"] += e.self_device_time_total / 1000
        out = os.environ.get("OUT", tempfile.gettempdir())
        with open(os.path.join(out, f"profile_{self.name}.txt"), "w") as f:
            f.write(f"two steps; kernel time (ms): { {k: round(v, 1) for k, v in busy.items()} }\n\n")
            f.write(events.table(sort_by=device_key, row_limit=45, max_name_column_width=70) + "\n\n")
            f.write(events.table(sort_by="self_cpu_time_total", row_limit=35, max_name_column_width=70) + "\n")


def step_profiler(name, is_main):
    """A StepProfiler on rank 0 where PROFILE is set, else None."""
    return StepProfiler(name) if is_main and os.environ.get("PROFILE") else None


class Measured(Exception):
    """Raised (as ComfyUI's cancel is) before the step after the measured ones: the run ends there as a
    cancelled run does, writing no final checkpoint and building no result model. (A full fine-tune's
    final checkpoint is the measurement's size or more: Flux.1-dev's with AdamW's state in fp32 is 48 GB of
    weights and 96 GB of optimizer shards, beyond the disk of a 2-GPU machine lent here, 128 GB.)"""


def tiny_inputs():
    """The tiny SDXL stack and the DreamBooth photos at 64 px, encoded (the CPU smoke run)."""
    import torch

    from eridiffusion.tiny_models import build_tiny_demo
    from eridiffusion.training.data.dataset import load_dataset
    from eridiffusion.training.data.training_data import build_training_data

    model, clip, vae = build_tiny_demo("sdxl", seed=0)
    dataset = load_dataset(os.path.join(ROOT, "demo", "data", "dreambooth_dog"))
    with torch.inference_mode():
        data = build_training_data(dataset, vae, clip, 64, tempfile.mkdtemp(prefix="eridiffusion-bench-cache-"))
    return model, data


def worker(name):
    """One experiment in one of torchrun's processes; rank 0 prints the RESULT line."""
    from eridiffusion.training.run.distributed import join_processes

    processes = join_processes()  # before ComfyUI is imported: its device is this process's GPU
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-bench-")
    import torch

    from bench.train_speed import build, random_data
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.precision import PrecisionSpec
    from eridiffusion.training.run.trainer import TrainingHooks, train_lora

    model_name = os.environ.get("MODEL", "sdxl")
    cuda = torch.cuda.is_available()
    batch = 1 if name == "device" else int(name.split("x")[1])
    if model_name == "tiny":
        patcher, data = tiny_inputs()
    else:
        patcher, data = build(model_name, os.environ.get("WEIGHTS", "bf16")), random_data(model_name, images=8)
    device = "cuda:1" if name == "device" else "auto"
    times, events, losses, peaks = [], [], [], []
    profiler = step_profiler(name, processes.is_main)

    def on_progress(step, total, new, stats):
        if profiler is not None:
            profiler.at_step(step)
        if cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            events.append(event)
        else:
            times.append(time.perf_counter())
        losses.extend(new or [])
        peaks.append(stats.get("peak_vram_gib", 0.0))

    def check_cancel():  # (before each step: the run ends once the measured steps are done)
        if len(peaks) == STEPS:
            raise Measured

    stream = float(os.environ.get("STREAM_GIB", "0"))  # weights_vram_gib: graphs cannot replay streamed weights
    checkpointing = stream > 0 or os.environ.get("CKPT", "1" if model_name == "flux" else "0") == "1"
    full = os.environ.get("ALGORITHM", "lora") == "full"
    sharding = os.environ.get("SHARDING", "none") if processes.distributed else "none"
    fit_one_gpu = full and not processes.distributed and os.environ.get("SINGLE", "same") == "fit"
    # (a sharded run's gathers run from hooks, a fused backward's updates from the backward: no graphs)
    eager = stream > 0 or sharding != "none" or fit_one_gpu
    if full:
        targets = os.environ.get("TARGETS", "all-linear")
        adapter = AdapterSpec(algorithm="full", targets=targets, include=os.environ.get("INCLUDE", ""))
    else:
        adapter = AdapterSpec(rank=16, alpha=16.0, targets="attention" if model_name in ("sdxl", "tiny") else "auto")
    config = TrainConfig(
        steps=STEPS + 1,  # (one more than measured: the run stops before it, see Measured)
        learning_rate=1e-4,
        dtype="bf16" if cuda else "fp32",
        batch_size=batch,
        gradient_checkpointing=checkpointing,
        cuda_graphs="on" if cuda and not eager else "off",
        weights_vram_gib=stream,
        optimizer="Adafactor" if fit_one_gpu else "AdamW",
        fused_backward=fit_one_gpu,
        device=device,
        adapter=adapter,
        precision=PrecisionSpec(sharding=sharding, fine_tune_dtype="bf16" if fit_one_gpu else "fp32"),
        log_every=STEPS,
        eval_images=1,
        eval_timesteps=1,
        run_name="bench",
    )
    if cuda:
        for index in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(index)
    run_dir = processes.decided_by_main(lambda: tempfile.mkdtemp(prefix="eridiffusion-bench-run-"))
    hooks = TrainingHooks(on_progress=on_progress, check_cancel=check_cancel)
    try:
        with torch.inference_mode(False):
            train_lora(patcher, data, config, run_dir, hooks=hooks, processes=processes)
        raise RuntimeError(f"the run ended before its step {STEPS + 1} without being stopped")
    except Measured:
        pass
    finally:
        if processes.is_main:
            shutil.rmtree(run_dir, ignore_errors=True)
    if cuda:
        torch.cuda.synchronize()
        times = [a.elapsed_time(b) / 1000 for a, b in zip(events[WARMUP:], events[WARMUP + 1 :])]
    else:
        times = [b - a for a, b in zip(times[WARMUP:], times[WARMUP + 1 :])]
    seconds = statistics.median(times)
    per_gpu = [torch.cuda.max_memory_allocated(i) / 2**30 for i in range(torch.cuda.device_count())] if cuda else []
    gathered = processes.gather({"s_per_step": seconds, "peak_GiB": peaks[-1]})
    if processes.is_main:
        slowest = max(g["s_per_step"] for g in gathered)  # a step ends when every GPU has finished it
        r = {
            "exp": name,
            "model": model_name,
            "processes": processes.world_size,
            "batch_per_process": batch,
            "s_per_step": slowest,
            "s_per_step_per_process": [g["s_per_step"] for g in gathered],
            "images_per_s": processes.world_size * batch / slowest,
            "peak_GiB_per_process": [g["peak_GiB"] for g in gathered],
            "losses": losses,
            "gradient_checkpointing": checkpointing,
            "weights": os.environ.get("WEIGHTS", "bf16"),
            "weights_vram_gib": stream,
            "algorithm": adapter.algorithm,
            "sharding": sharding,
            "optimizer": config.optimizer,
            "fine_tune_dtype": config.precision.fine_tune_dtype,
            "fused_backward": config.fused_backward,
        }
        if name == "device":  # trained on cuda:1: what each GPU of this process held at its peak
            r["peak_GiB_per_device"] = per_gpu
        print("RESULT", json.dumps(r), flush=True)
    processes.close()


def topology():
    """How the machine's GPUs are linked (`nvidia-smi topo -m`'s matrix), or None without nvidia-smi: the
    sharded runs' gathers and reduce-scatters are as fast as the links."""
    try:
        done = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return re.sub(r"\x1b\[[0-9;]*m", "", done.stdout).split("\n\nLegend")[0] if done.returncode == 0 else None


def main():
    plan = experiments(os.environ.get("PLAN", "1x1,2x1,1x2"))
    if "--plan" in sys.argv:
        print(json.dumps({name: worker_command(name, processes) for name, processes, _ in plan}, indent=1))
        return
    import torch

    model_name = os.environ.get("MODEL", "sdxl")
    if model_name != "tiny":
        from eridiffusion.runtime import start_host_in_temp_dir

        start_host_in_temp_dir("eridiffusion-bench-")
        from bench.train_speed import weights_file

        weights_file(model_name)  # once, here: the workers all load it
    out = os.environ.get("OUT", tempfile.gettempdir())
    os.makedirs(out, exist_ok=True)
    results = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    for name, processes, _ in plan:
        started = time.time()
        done = subprocess.run(worker_command(name, processes), env=env, capture_output=True, text=True, check=False)
        lines = [line[len("RESULT ") :] for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        with open(os.path.join(out, f"multi_gpu_{name}.log"), "w") as f:
            f.write(done.stdout + "\n" + done.stderr)  # (each experiment's whole output, beside the summary)
        r = json.loads(lines[-1]) if lines else {"exp": name, "error": first_error(done.stderr)}
        r["wall_s"] = round(time.time() - started, 1)
        results.append(r)
        print("RESULT", json.dumps(r), flush=True)
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "gpus": torch.cuda.device_count(),
        "torch": torch.__version__,
        "model": model_name,
        "topology": topology(),
        "steps": STEPS,
        "results": results,
        "comparisons": comparisons(results),
    }
    with open(os.path.join(out, "multi_gpu.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        main()
