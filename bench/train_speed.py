"""EriDiffusion's trainer against ComfyUI's built-in TrainLoraNode, side by side in one process,
on full-size architectures with random weights (nothing downloaded): 1024², batch 1, rank 16, bf16.

Ours is timed with CUDA events at each optimizer step (median over the steps after warm-up);
the built-in, which offers no per-step hook, by the difference of a short and a long run (as
../shared/bench/comfy_builtin_baseline.py measured the published baseline). Peak memory is
torch.cuda.max_memory_allocated over the training steps. Prints one `RESULT {json}` line per
experiment and writes $OUT/train_speed.json.

    COMFYUI_PATH=... PLAN=ours_sdxl_ckpt,builtin_sdxl_ckpt python bench/train_speed.py
Experiments: ours_<model>_<ckpt|nockpt>[_alllinear], builtin_<model>_<ckpt|nockpt>; model: sdxl.
"""
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.full_size import SDXL_UNET  # noqa: E402



def stub_pyav():
    """ComfyUI's API module imports PyAV for video I/O, which no experiment here touches; the GPU
    image lacks it."""
    try:
        import av  # noqa: F401
    except ImportError:
        module = types.ModuleType("av")
        module.__path__ = []

        def stand_in(name):
            if name.startswith("__"):
                raise AttributeError(name)
            return type(name, (), {})
        module.__getattr__ = stand_in
        sys.modules["av"] = module
        for sub in ("container", "subtitles", "subtitles.stream", "audio", "video", "frame"):
            sys.modules[f"av.{sub}"] = module


def build_sdxl():
    import comfy.model_management as mm
    import comfy.model_patcher
    import comfy.supported_models
    import torch
    config = comfy.supported_models.SDXL(dict(SDXL_UNET))
    config.set_inference_dtype(torch.bfloat16, None)
    device = mm.get_torch_device()
    model = config.get_model({}, device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():  # the baseline's init, so both trainers see the same kind of weights
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.02, generator=generator)
            elif "norm" in name and name.endswith("weight"):
                p.fill_(1.0)
            else:
                p.normal_(0, 0.01, generator=generator)
    model.eval()
    return comfy.model_patcher.ModelPatcher(model, load_device=device, offload_device=torch.device("cpu"))


def random_data(images=4, resolution=1024):
    import torch
    from eridiffusion.training.latent_cache import TrainingData, TrainingSample
    generator = torch.Generator().manual_seed(1)
    side = resolution // 8
    samples = []
    for i in range(images):
        cond = [[torch.randn(1, 77, 2048, generator=generator) * 0.5,
                 {"pooled_output": torch.randn(1, 1280, generator=generator) * 0.5}]]
        samples.append(TrainingSample(f"random_{i}", torch.randn(4, side, side, generator=generator), [cond],
                                      (resolution, resolution), ("random",)))
    empty = [[torch.zeros(1, 77, 2048), {"pooled_output": torch.zeros(1, 1280)}]]
    return TrainingData(samples, empty, 0.0, 1, resolution, "random")


def ours(patcher, checkpointing, targets, steps=14, warmup=4):
    import torch
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.config import TrainConfig
    from eridiffusion.training.trainer import TrainingHooks, train_lora
    events = []
    profile_steps = (warmup + 2, warmup + 4) if os.environ.get("PROFILE") else None
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                  torch.profiler.ProfilerActivity.CUDA])

    def on_progress(step, total, losses, stats):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        events.append(event)
        if profile_steps and step == profile_steps[0]:
            profiler.start()
        if profile_steps and step == profile_steps[1]:
            profiler.stop()
            name = f"profile_{'ckpt' if checkpointing else 'nockpt'}_{targets}_{os.environ.get('LYCORIS_KERNEL_BACKEND', 'auto')}"
            table = profiler.key_averages().table(sort_by="self_cuda_time_total", row_limit=25)
            table += "\n" + profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
            with open(os.path.join(os.environ.get("OUT", "/tmp"), name + ".txt"), "w") as f:
                f.write(table)

    config = TrainConfig(steps=steps, learning_rate=1e-4, dtype="bf16", gradient_checkpointing=checkpointing,
                         adapter=AdapterSpec(rank=16, alpha=16.0, targets=targets), log_every=steps,
                         eval_images=1, eval_timesteps=1, run_name="bench")
    with torch.inference_mode(False):
        result = train_lora(patcher, random_data(), config, tempfile.mkdtemp(), hooks=TrainingHooks(on_progress))
    torch.cuda.synchronize()
    times = [a.elapsed_time(b) / 1000 for a, b in zip(events[warmup:], events[warmup + 1:])]
    return {"s_per_step": statistics.median(times), "steps_timed": len(times), "peak_GiB": result.peak_memory_gib,
            "loss_first_last": [result.losses[0], result.losses[-1]],
            "trainable_parameters": sum(p.numel() for p in result.adapters.parameters())}


def builtin(patcher, checkpointing, short=3, long=13):
    """ComfyUI's TrainLoraNode exactly as the published baseline ran it."""
    import torch
    import comfy_extras.nodes_train as nodes_train
    data = random_data()

    def run(steps):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        latents = [{"samples": s.latent[None].to(torch.bfloat16)} for s in data.samples]
        cond = data.samples[0].conditionings[0]
        nodes_train.TrainLoraNode.execute(
            model=[patcher], latents=latents, positive=[cond], batch_size=[1], steps=[steps],
            grad_accumulation_steps=[1], learning_rate=[1e-4], rank=[16], optimizer=["AdamW"], loss_function=["MSE"],
            seed=[0], training_dtype=["bf16"], lora_dtype=["bf16"], algorithm=["LoRA"],
            gradient_checkpointing=[checkpointing], existing_lora=["[None]"])
        torch.cuda.synchronize()
        return time.perf_counter() - started, torch.cuda.max_memory_allocated() / 2**30

    t_short, p_short = run(short)
    t_long, p_long = run(long)
    return {"s_per_step": (t_long - t_short) / (long - short), "peak_GiB": max(p_short, p_long)}


def main():
    stub_pyav()
    from demo.runtime import start_host
    start_host(tempfile.mkdtemp(prefix="eridiffusion-bench-"))
    import torch
    plan = [p for p in os.environ.get("PLAN", "ours_sdxl_ckpt,builtin_sdxl_ckpt").split(",") if p]
    results = []
    for item in plan:
        parts = item.split("_")
        kind, model_name, checkpointing = parts[0], parts[1], parts[2] == "ckpt"
        started = time.time()
        try:
            patcher = build_sdxl()
            if kind == "ours":
                r = ours(patcher, checkpointing, "all-linear" if "alllinear" in parts else "attention")
            else:
                r = builtin(patcher, checkpointing)
        except Exception as error:  # one failure must not hide the other figures
            import traceback
            traceback.print_exc()
            r = {"error": repr(error)[:300]}
        r.update({"exp": item, "model": model_name, "grad_ckpt": checkpointing, "wall_s": round(time.time() - started, 1)})
        results.append(r)
        print("RESULT", json.dumps(r), flush=True)
        patcher = None
        gc.collect()
        torch.cuda.empty_cache()
    import subprocess
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    summary = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "commit": commit or os.environ.get("COMMIT", ""), "resolution": 1024, "rank": 16, "results": results}
    by = {r["exp"]: r for r in results}
    for name, r in by.items():
        other = by.get(name.replace("ours_", "builtin_").replace("_alllinear", ""))
        if name.startswith("ours_") and other and "s_per_step" in r and "s_per_step" in other:
            r["speedup_vs_builtin"] = other["s_per_step"] / r["s_per_step"]
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "train_speed.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
