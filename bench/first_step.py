"""How long LoRATrainer takes from its start to its first finished step, by setup phase (issue 44:
≤ 6 s on full-size SDXL), on a full-size architecture with random weights (bench/train_speed.py
writes them once per machine), loaded as the SDXL example's CheckpointLoaderSimple gives them to a
GPU (fp16 on NVIDIA; WEIGHTS=bf16 for a diffusion model file), trained as the example trains (bf16,
rank 16, CUDA graphs, the evaluation loss over 8 images x 8 noise levels).

Two runs in one process: the first pays the process's first use of the model on the GPU (cuBLAS and
cuDNN handles, kernel loading), as the example's trainer does after CacheLatents; the second shows a
second queue of the same graph. PROFILE=python adds a third run under cProfile and writes its
slowest functions of the setup to $OUT/first_step_profile.txt. Prints `RESULT {json}` per run and
writes $OUT/first_step.json.

    COMFYUI_PATH=<0.28 tree> MODEL=sdxl python bench/first_step.py
"""

import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import train_speed  # noqa: E402

MODEL = os.environ.get("MODEL", "sdxl")
WEIGHTS = os.environ.get("WEIGHTS", "fp16" if MODEL == "sdxl" else "bf16")


def loaded_model():
    """The random full-size model as the graph's loader gives it (WEIGHTS: its dtype)."""
    import comfy.sd
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[WEIGHTS]
    return comfy.sd.load_diffusion_model(train_speed.weights_file(MODEL), model_options={"dtype": dtype})


def one_run(patcher, profile=None):
    """A 3-step run of the example's settings; its summary's setup figures."""
    import torch

    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.trainer import train_lora

    config = TrainConfig(
        steps=3,
        learning_rate=1e-4,
        dtype="bf16",
        gradient_checkpointing=MODEL != "sdxl",
        cuda_graphs="on",
        adapter=AdapterSpec(rank=16, alpha=16.0),
        log_every=1,
        run_name="first_step",
    )
    data = train_speed.random_data(MODEL, images=8)
    started = time.perf_counter()
    if profile is not None:
        profile.enable()
    with torch.inference_mode(False):
        result = train_lora(patcher, data, config, tempfile.mkdtemp())
    if profile is not None:
        profile.disable()
    return {
        "call_to_return_s": time.perf_counter() - started,
        "start_to_first_step_s": result.setup_seconds + result.first_step_seconds,
        "setup_s": result.setup_seconds,
        "first_step_s": result.first_step_seconds,
        "setup_phases_s": result.setup_phases,
        "s_per_step": result.seconds_per_step,
    }


def main():
    train_speed.stub_pyav()
    train_speed.load_aimdo()
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-bench-")
    import torch

    dynamic_vram = train_speed.enable_dynamic_vram()
    patcher = loaded_model()
    rows = []
    for label in ("first run of the process", "second run"):
        row = {"run": label, "model": MODEL, "weights": WEIGHTS, **one_run(patcher)}
        print("RESULT " + json.dumps(row), flush=True)
        rows.append(row)
    if os.environ.get("PROFILE") == "python":
        import cProfile
        import io
        import pstats

        profile = cProfile.Profile()
        one_run(patcher, profile)
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(120)
        with open(os.path.join(os.environ.get("OUT", "/tmp"), "first_step_profile.txt"), "w") as f:
            f.write(text.getvalue())
    header = train_speed.run_header(dynamic_vram)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "first_step.json"), "w") as f:
        json.dump({**header, "device": torch.cuda.get_device_name(0), "runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
