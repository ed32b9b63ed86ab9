"""The non-finite guard on a CUDA device with CUDA graphs (tests/ run on a CPU): a step still reads
nothing back except on logging steps, with on_nan=stop and on_nan=skip; skip leaves out exactly the
bad steps on the device (fused AdamW's found_inf); a diverged fp16 run stops with the named error.
Tiny SD1.5, the DreamBooth photos. Prints one `RESULT {json}` line per check.

    COMFYUI_PATH=... python bench/non_finite_gpu.py
"""

import collections
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.train_speed import stub_pyav  # noqa: E402


def main():
    stub_pyav()
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-nonfinite-")
    import torch
    from torch.overrides import TorchFunctionMode

    from devkit.paths import shared_datasets
    from eridiffusion.errors import EriDiffusionError
    from eridiffusion.tiny_models import tiny_sd15
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.data.dataset import load_dataset
    from eridiffusion.training.data.training_data import build_training_data
    from eridiffusion.training.run.build import TrainingRun
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.trainer import TrainingHooks, train

    read_backs = {
        torch.Tensor.item,
        torch.Tensor.tolist,
        torch.Tensor.cpu,
        torch.Tensor.numpy,
        torch.Tensor.__bool__,
        torch.Tensor.__float__,
        torch.Tensor.__int__,
        torch.Tensor.__index__,
    }

    class ReadBackCounter(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.step, self.counts = 1, collections.Counter()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in read_backs:
                self.counts[self.step] += 1
            return func(*args, **(kwargs or {}))

    model, clip, vae = tiny_sd15(seed=0)
    with torch.inference_mode():
        data = build_training_data(
            load_dataset(os.path.join(shared_datasets(), "dreambooth_dog")), vae, clip, 128, tempfile.mkdtemp()
        )
    data.samples = data.samples[:4]
    out = tempfile.mkdtemp()

    def run(config, watch=None, eval_skipped=True):
        training = TrainingRun(model, data, config, os.path.join(out, config.run_name))
        try:
            if eval_skipped:
                training.progress.eval_before = 0.0
            counter = watch or ReadBackCounter()

            def on_progress(step, total, losses, stats):
                counter.step = step + 1

            with torch.inference_mode(False), counter:
                train(training, None, TrainingHooks(on_progress=on_progress))
            steps = {int(s["step"]) for s in training.optimizer.state.values()}
            return training, counter, steps
        finally:
            training.release()

    adapter = AdapterSpec(rank=4, alpha=4.0, targets="all-linear")
    for on_nan in ("stop", "skip"):
        config = TrainConfig(
            gradient_checkpointing=False,
            steps=8,
            learning_rate=1e-3,
            dtype="bf16",
            log_every=4,
            cuda_graphs="on",
            on_nan=on_nan,
            run_name=f"sync_{on_nan}",
            adapter=adapter,
        )
        _, counter, _ = run(config)
        in_steps = {step: n for step, n in counter.counts.items() if step <= config.steps}
        print(
            "RESULT "
            + json.dumps(
                {
                    "check": f"read-backs per step, cuda_graphs on, on_nan={on_nan}",
                    "counts": in_steps,
                    "ok": in_steps == {4: 1, 8: 1},
                }
            ),
            flush=True,
        )

    with torch.inference_mode(False):
        data.samples[2].latent = torch.full_like(data.samples[2].latent, float("nan"))
    config = TrainConfig(
        gradient_checkpointing=False,
        steps=12,
        learning_rate=1e-3,
        dtype="bf16",
        log_every=4,
        cuda_graphs="on",
        on_nan="skip",
        batch_size=1,
        run_name="skip_nan",
        adapter=adapter,
    )
    training, _, updates = run(config)
    skipped = [i + 1 for i, loss in enumerate(training.losses) if loss != loss]
    finite = all(bool(torch.isfinite(p).all()) for p in training.adapters.parameters())
    print(
        "RESULT "
        + json.dumps(
            {
                "check": "on_nan=skip with a NaN latent, cuda_graphs on",
                "skipped": skipped,
                "adam_steps": sorted(updates),
                "adapters_finite": finite,
                "ok": bool(skipped) and updates == {12 - len(skipped)} and finite,
            }
        ),
        flush=True,
    )

    config = TrainConfig(
        gradient_checkpointing=False,
        steps=12,
        learning_rate=1e-3,
        dtype="bf16",
        log_every=4,
        cuda_graphs="on",
        on_nan="stop",
        batch_size=1,
        run_name="stop_nan",
        adapter=adapter,
    )
    try:
        run(config)
        message = None
    except EriDiffusionError as error:
        message = str(error)
    print(
        "RESULT "
        + json.dumps(
            {
                "check": "on_nan=stop with a NaN latent, cuda_graphs on",
                "error": message,
                "ok": message is not None
                and message.startswith(f"training stopped at step {skipped[0]} of 12: the loss is nan."),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
