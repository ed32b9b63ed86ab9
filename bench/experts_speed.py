"""Wan 2.2 14B's two experts trained in one run (TrainingObjective's low_noise_model) against two runs of
one expert each, on full-size Wan 14B models with random weights (nothing downloaded; the layout of
Wan 2.2 T2V A14B's experts, which is Wan 2.1 14B's), bf16, 480p clips of 33 frames, gradient
checkpointing, rank 16: the one run must cost no more per step than the two.

Each run is timed at every optimizer step (CUDA events on a GPU, the clock on the CPU; the median over
the steps after warm-up). Prints one `RESULT {json}` line and writes $OUT/experts_speed.json:
the high-noise run's, the low-noise run's and the two-expert run's s/step, the two single runs' mean
(weighted by the steps each expert takes in the two-expert run), their ratio, peak memory, and how
many steps each expert trained.

    COMFYUI_PATH=... python bench/experts_speed.py           # full size, one H100 (both experts resident)
    TINY=1 python bench/experts_speed.py                     # the tiny Wan stacks on the CPU: a check that it runs
Options: STEPS (timed steps of each run, default 24; TINY 8), WARMUP (4; TINY 2), WEIGHTS=fp8 (the
experts' weights stored as float8_e4m3fn, as UNETLoader's weight_dtype), GRAPHS=on|off|auto (cuda_graphs,
default auto), SWITCH=N (switch_boundary_every N; default 0: by each step's noise level).
"""

import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TINY = os.environ.get("TINY") == "1"
STEPS = int(os.environ.get("STEPS", 8 if TINY else 24))
WARMUP = int(os.environ.get("WARMUP", 2 if TINY else 4))
SWITCH = int(os.environ.get("SWITCH", 0))


def experts():
    """(high-noise MODEL, low-noise MODEL, the Work of a step): two full-size Wan 14B loaded from one
    random-weight file as UNETLoader loads it (two models in memory), or the tiny Wan stacks."""
    if TINY:
        from bench.train_speed import Work
        from devkit.tiny_models import build_tiny

        return build_tiny("wan21_t2v", seed=0)[0], build_tiny("wan21_t2v", seed=1)[0], Work(64, frames=9, rank=8)
    from bench.train_speed import Work, build

    weights = "fp8" if os.environ.get("WEIGHTS") == "fp8" else "bf16"
    return build("wan", weights), build("wan", weights), Work.of([], "wan")


def timed_run(high, work, low=None, expert=None, steps=STEPS):
    """s/step (median after WARMUP), peak GiB and the experts' step counts of one run: two experts
    (`low`), or expert `expert` ("high_noise" / "low_noise") of `high` alone on its noise range."""
    import torch

    from bench.train_speed import random_data
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.model.family_row import WAN22_EXPERT_BOUNDARY
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.experts import expert_config
    from eridiffusion.training.run.trainer import TrainingHooks, train_lora

    cuda = torch.cuda.is_available()
    marks = []

    def on_progress(step, total, losses, stats):
        if cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            marks.append(event)
        else:
            marks.append(time.perf_counter())

    config = TrainConfig(
        steps=WARMUP + steps,
        learning_rate=1e-4,
        dtype="fp32" if not cuda else "bf16",
        gradient_checkpointing=True,
        cuda_graphs=os.environ.get("GRAPHS", "auto") if cuda else "off",
        adapter=AdapterSpec(rank=work.rank, alpha=float(work.rank), targets="blocks"),
        log_every=WARMUP + steps,
        eval_images=1,
        eval_timesteps=1,
        run_name="bench_experts",
        switch_boundary_every=SWITCH if low is not None else 0,
    )
    if expert is not None:  # one expert alone: its range, as the two-expert run gives it
        config = expert_config(config, ("high_noise", "low_noise").index(expert), WAN22_EXPERT_BOUNDARY)
    data = random_data("tiny_wan" if TINY else "wan", images=4, work=work)
    with torch.inference_mode(False):
        result = train_lora(
            high, data, config, tempfile.mkdtemp(), hooks=TrainingHooks(on_progress), low_noise_model=low
        )
    if cuda:
        torch.cuda.synchronize()
        times = [a.elapsed_time(b) / 1000 for a, b in zip(marks[WARMUP:], marks[WARMUP + 1 :])]
    else:
        times = [b - a for a, b in zip(marks[WARMUP:], marks[WARMUP + 1 :])]
    with open(os.path.join(result.run_dir, "summary.json")) as f:
        summary = json.load(f)
    return {
        "s_per_step": statistics.median(times),
        "steps_timed": len(times),
        "peak_GiB": result.peak_memory_gib,
        "experts": summary.get("experts"),
    }


def main():
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-bench-experts-")
    import comfy.model_management as mm

    high, low, work = experts()
    rows = {name: timed_run(high, work, expert=name) for name in ("high_noise", "low_noise")}
    mm.unload_all_models()
    rows["two_experts"] = timed_run(high, work, low=low, steps=2 * STEPS)
    trained = rows["two_experts"]["experts"]
    shares = [trained[name]["steps"] for name in ("high_noise", "low_noise")]
    single = sum(rows[name]["s_per_step"] * n for name, n in zip(("high_noise", "low_noise"), shares)) / sum(shares)
    result = {
        "model": "tiny wan21_t2v (CPU check)" if TINY else "Wan 14B x2 (Wan 2.2 T2V A14B layout), random weights",
        "work": work.record(),
        "device": mm.get_torch_device_name(mm.get_torch_device()),
        "runs": rows,
        "single_expert_runs_s_per_step": single,
        "two_experts_s_per_step": rows["two_experts"]["s_per_step"],
        "ratio_two_experts_to_single": rows["two_experts"]["s_per_step"] / single,
    }
    print("RESULT " + json.dumps(result))
    with open(os.path.join(os.environ.get("OUT", tempfile.gettempdir()), "experts_speed.json"), "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
