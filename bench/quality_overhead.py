"""What issue 14's quality features cost per step, in one process on one model: a plain run against
runs with validation (its check, and amortised over validate_every), an EMA of the weights, masked
loss and differential output preservation (DOP: one extra no-grad forward with the adapters
bypassed and one adapted forward per micro-batch), each timed with CUDA events at every optimizer
step (median after warm-up), as bench/train_speed.py times the trainer.

Full size (the default): SDXL at 1024², batch 1, rank 16, bf16, attention targets, gradient
checkpointing and CUDA graphs, random weights loaded as UNETLoader loads them (bench/train_speed.py
builds and caches the file); the text conditioning is random, and DOP's class phrase is "encoded" by
a stand-in CLIP giving a random conditioning of the right shape.

    COMFYUI_PATH=... python bench/quality_overhead.py   # a GPU; prints JSON, writes $OUT/quality_overhead.json
    TINY=1 python bench/quality_overhead.py             # tiny SDXL, 64 px, on the CPU (wall-clock): a smoke run

PLAN=baseline,validation,ema,mask,dop,dop_every2,dop_every3,all picks the runs (dop_everyN: preservation_every N,
its amortised figure the mean of one step with the preservation pass and N-1 without); GRAPHS=0 turns CUDA
graphs off; STEPS, WARMUP.
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
STEPS = int(os.environ.get("STEPS", "12" if TINY else "24"))
WARMUP = int(os.environ.get("WARMUP", "3" if TINY else "6"))
VALIDATE_EVERY = 6  # in the bench (its checks are timed); amortised figures are given for USUAL_EVERY
USUAL_EVERY = 50  # validate_every's default
RUNS = {
    "baseline": {},
    "validation": {"validate_every": VALIDATE_EVERY},
    "ema": {"ema_decay": 0.999},
    "mask": {"mask_min": 0.1},
    "dop": {"preservation_prompt": "a photo of a dog"},
    "dop_every2": {"preservation_prompt": "a photo of a dog", "preservation_every": 2},
    "dop_every3": {"preservation_prompt": "a photo of a dog", "preservation_every": 3},
    "all": {"validate_every": VALIDATE_EVERY, "ema_decay": 0.999, "mask_min": 0.1, "preservation_prompt": "a dog"},
}


class StepClock:
    """Marks the end of every optimizer step: CUDA events on a GPU, wall-clock on the CPU."""

    def __init__(self, cuda):
        self.cuda, self.marks = cuda, []

    def mark(self, *_):
        import torch

        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def step_times(self):
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1000 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


class RandomClip:
    """Stands in for a CLIP where the bench has none (full size): any text → a random conditioning of
    SDXL's shape (the class phrase of DOP)."""

    def __init__(self, tokens, width, pooled):
        self.shape = (tokens, width, pooled)

    def tokenize(self, text):
        return text

    def encode_from_tokens_scheduled(self, tokens, **_):
        import torch

        count, width, pooled = self.shape
        generator = torch.Generator().manual_seed(len(tokens))
        return [
            [
                torch.randn(1, count, width, generator=generator) * 0.5,
                {"pooled_output": torch.randn(1, pooled, generator=generator) * 0.5},
            ]
        ]


def stack():
    """(MODEL, CLIP-like, data) of the bench: full-size SDXL with random data, or the tiny SDXL of the
    demo node with its own CLIP's conditioning."""
    import torch

    from eridiffusion.training.data.training_data import TrainingData, TrainingSample

    if TINY:
        from eridiffusion.tiny_models import tiny_sdxl

        model, clip, _ = tiny_sdxl(seed=0)
        conditioning = clip.encode_from_tokens_scheduled(clip.tokenize("a photo of sks dog"))
        empty = clip.encode_from_tokens_scheduled(clip.tokenize(""))
        resolution = 64
    else:
        from bench.train_speed import SHAPES, build

        model = build("sdxl")
        _, tokens, width, pooled = SHAPES["sdxl"]
        clip = RandomClip(tokens, width, pooled)
        conditioning = clip.encode_from_tokens_scheduled("a photo of sks dog, a corgi")
        empty = [[torch.zeros(1, tokens, width), {"pooled_output": torch.zeros(1, pooled)}]]
        resolution = 1024
    side = resolution // 8
    generator = torch.Generator().manual_seed(1)
    mask = torch.ones(1, side, side)
    mask[..., : side // 2] = 0.0

    def samples(count, masked):
        return [
            TrainingSample(
                f"random_{i}",
                torch.randn(4, side, side, generator=generator),
                [conditioning],
                (resolution, resolution),
                ("random",),
                mask=mask if masked else None,
            )
            for i in range(count)
        ]

    def data(masked):
        validation = TrainingData(samples(1, masked), empty, 0.0, 1, resolution, "")
        return TrainingData(samples(4, masked), empty, 0.0, 1, resolution, "random", validation=validation)

    return model, clip, data


def run(model, clip, data_of, name, settings):
    import torch

    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.trainer import TrainingHooks, train_lora

    cuda = torch.cuda.is_available() and not TINY
    config = TrainConfig(
        steps=STEPS,
        learning_rate=1e-4,
        dtype="bf16" if cuda else "fp32",
        gradient_checkpointing=True,
        cuda_graphs="on" if cuda and os.environ.get("GRAPHS") != "0" else "off",
        adapter=AdapterSpec(rank=16 if cuda else 4, alpha=16.0 if cuda else 4.0, targets="attention"),
        log_every=STEPS,
        validate_every=settings.get("validate_every", 1000000),
        eval_images=1,
        eval_timesteps=1,
        run_name=f"quality_{name}",
        **{k: v for k, v in settings.items() if k != "validate_every"},
    )
    data = data_of("mask_min" in settings)
    if "validate_every" not in settings:
        data.validation = None
    clock = StepClock(cuda)
    started = time.perf_counter()
    with torch.inference_mode(False):
        result = train_lora(
            model, data, config, tempfile.mkdtemp(), hooks=TrainingHooks(on_progress=clock.mark), clip=clip
        )
    wall = time.perf_counter() - started
    times = clock.step_times()[WARMUP:]  # step k's time: from the end of step k-1 to the end of step k
    steps = list(range(WARMUP + 2, STEPS + 1))
    checks = [t for s, t in zip(steps, times) if "validate_every" in settings and s % VALIDATE_EVERY == 0]
    plain = [t for s, t in zip(steps, times) if not ("validate_every" in settings and s % VALIDATE_EVERY == 0)]
    median = statistics.median(plain)
    out = {
        "s_per_step": median,
        "steps_timed": len(plain),
        "peak_GiB": result.peak_memory_gib,
        "loss_first_last": [result.losses[0], result.losses[-1]],
        "wall_s": round(wall, 1),
    }
    every = settings.get("preservation_every", 1)
    if every > 1:  # steps with and without the preservation pass: their mean over whole cycles
        with_pass = [t for s, t in zip(steps, times) if (s - 1) % every == 0]
        without = [t for s, t in zip(steps, times) if (s - 1) % every != 0]
        out.update(
            preservation_step_s=statistics.median(with_pass),
            plain_step_s=statistics.median(without),
            amortised_s_per_step=(statistics.median(with_pass) + (every - 1) * statistics.median(without)) / every,
        )
    if checks:
        check = statistics.median(checks) - median
        out.update(
            validation_check_s=check,
            validation_points=result.validation,
            amortised_s_per_step=median + check / USUAL_EVERY,
            amortised_at_validate_every=USUAL_EVERY,
        )
    return out


def main():
    if not TINY:
        from bench.train_speed import stub_pyav

        stub_pyav()
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-bench-")
    import torch

    if TINY:
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from eridiffusion.comfy_compat import host_version

    model, clip, data_of = stack()
    plan = [p for p in os.environ.get("PLAN", ",".join(RUNS)).split(",") if p]
    results = {}
    for name in plan:
        try:
            results[name] = run(model, clip, data_of, name, RUNS[name])
        except Exception as error:  # one failure must not hide the other figures
            import traceback

            traceback.print_exc()
            results[name] = {"error": repr(error)[:500]}
        print("RESULT", name, json.dumps(results[name]), flush=True)
    base = results.get("baseline", {}).get("s_per_step")
    overhead = {}
    for name, r in results.items():
        if base and name != "baseline" and "s_per_step" in r:
            key = "amortised_s_per_step" if "amortised_s_per_step" in r else "s_per_step"
            overhead[name] = {"step_ratio": r["s_per_step"] / base, "amortised_ratio": r[key] / base}
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() and not TINY else "cpu",
        "model": "tiny SDXL, 64 px" if TINY else "SDXL 1024², random weights",
        "torch": torch.__version__,
        "comfyui": host_version(),
        "steps": STEPS,
        "warmup": WARMUP,
        "cuda_graphs": not TINY and torch.cuda.is_available() and os.environ.get("GRAPHS") != "0",
        "results": results,
        "overhead_vs_baseline": overhead,
    }
    text = json.dumps(summary, indent=1)
    with open(os.path.join(os.environ.get("OUT", tempfile.gettempdir()), "quality_overhead.json"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
