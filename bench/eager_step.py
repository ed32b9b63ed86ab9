"""Where an eager (no CUDA graphs) SDXL training step's time goes, in one process on the GPU:
the frozen model's own forward + backward (the floor: adapters taken off, the noisy latent
requiring grad) against the adapted model's, with the LoRA layers as one autograd node each
(`fused`), as the plain ops they were before (`unfused`, the baseline kept here), as one node
each computing with the step's bf16 copies of the adapter weights (`copies`:
adapters/compute_copies.py), and that with the layers that take one input computed as one node
(`grouped`, what an eager bf16 run of this checkout does: adapters/shared_input.py). The adapters'
gradients of one batch with and without the groups are compared too (bf16: equal up to rounding).
(Routing the products to cuBLAS gained nothing: bench/results/2026-11-25_eager_step_copies_*.)

Full-size SDXL with random weights loaded through UNETLoader's code (bench/train_speed.py),
1024², batch 1, rank 16, attention targets, bf16. Each variant runs 3 rounds of 8 timed steps,
interleaved with the others (the CPU of a lent machine drifts run to run); a step is timed with
CUDA events. One more step of each runs under torch.profiler: kernel launches, aten ops, autograd
nodes and the GPU's busy time per step. Prints one JSON object and writes $OUT/eager_step.json
(and $OUT/eager_step_profile.txt, the CPU-time tables).

    COMFYUI_PATH=... python bench/eager_step.py
"""

import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.train_speed import build, random_data, stub_pyav  # noqa: E402
from devkit.dynamic_vram import enable_dynamic_vram, load_aimdo  # noqa: E402


def unfused_forward(self, x, base):
    """LoRA's bypass as plain ops (before lora_linear.py): the baseline."""
    import torch

    lycoris = self.lycoris
    if not self.linear or x.dim() < 2 or self.multiplier == 0:
        return type(self).__mro__[1].forward(self, x, base)
    out = base(x)
    hidden = torch.nn.functional.linear(x, lycoris.lora_down.weight.to(x.dtype))
    flat = torch.addmm(
        out.reshape(-1, out.shape[-1]),
        hidden.reshape(-1, hidden.shape[-1]).to(out.dtype),
        lycoris.lora_up.weight.t().to(out.dtype),
        alpha=self.scale * self.multiplier,
    )
    return flat.view(out.shape)


def profiled(step, torch):
    """(launches, aten ops, autograd nodes, GPU busy seconds, CPU table) of one call of `step`."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        step()
        torch.cuda.synchronize()
    events = prof.key_averages()
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC"))
    aten = sum(e.count for e in events if e.key.startswith("aten::"))
    nodes = sum(e.count for e in events if e.key.startswith("autograd::engine::evaluate_function"))
    gpu = sum(e.self_device_time_total for e in events if e.device_type == torch.autograd.DeviceType.CUDA) / 1e6
    return launches, aten, nodes, gpu, events.table(sort_by="self_cpu_time_total", row_limit=20)


def main():
    stub_pyav()
    load_aimdo()
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-bench-")
    import torch

    enable_dynamic_vram()
    from eridiffusion.comfy_compat import host_version, training_forward
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.adapters.attach import eject_adapter, inject_adapter
    from eridiffusion.training.adapters.lora import LoRA
    from eridiffusion.training.model import loading as model_loading
    from eridiffusion.training.model.forward import transformer_options_of
    from eridiffusion.training.run.build import TrainingRun
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.micro_batches import MicroBatches, loss_function, prepared
    from eridiffusion.training.speed.compute_copies import ComputeCopies

    config = TrainConfig(
        steps=10,
        dtype="bf16",
        gradient_checkpointing=False,
        cuda_graphs="off",
        adapter=AdapterSpec(rank=16, alpha=16.0, targets="attention"),
        run_name="bench",
    )
    run = TrainingRun(build("sdxl"), random_data("sdxl"), config, tempfile.mkdtemp())
    model_loading.load(run.patcher)
    training = prepared(run, run.data)
    loss_of = loss_function(run, transformer_options_of(run.patcher))
    with torch.inference_mode(False), training_forward():
        batch = MicroBatches(run, training).draw(training, run.batches, run.data)
    modules = dict(run.base.named_modules())
    pairs = [(modules[name], adapter) for name, adapter in run.trained.adapters.items()]

    class PlainOpsLoRA(LoRA):
        """The baseline: LoRA's bypass as the plain ops it was before lora_linear.py."""

        forward = unfused_forward

    # each adapted step starts from no gradients, as the trainer's do (zero_grad(set_to_none=True)):
    # accumulating into the last step's would add a kernel per adapter tensor
    def adapted_step():
        run.trained.adapters.zero_grad(set_to_none=True)
        with torch.inference_mode(False), training_forward():
            loss_of(batch).backward()

    copies = ComputeCopies(run.trained.adapters, torch.bfloat16, share_inputs=False)
    grouped = ComputeCopies(run.trained.adapters, torch.bfloat16)  # its groups are learned in its first step

    def step_with(compute_copies):
        def step():
            run.trained.adapters.zero_grad(set_to_none=True)
            with torch.inference_mode(False), training_forward(), compute_copies.in_use():
                loss_of(batch).backward()
                compute_copies.fold_gradients()

        return step

    def floor_step():
        frozen = dict(batch, x_t=batch["x_t"].detach().requires_grad_(True))
        with torch.inference_mode(False), training_forward():
            loss_of(frozen).backward()

    def variant(name):
        """Set the model up as `name` and return its step."""
        for _, adapter in pairs:  # (the same adapter, its forward as the baseline's or as shipped)
            adapter.__class__ = PlainOpsLoRA if name == "unfused" else LoRA
        floor = name.startswith("floor")
        for module, adapter in pairs:
            (eject_adapter if floor else inject_adapter)(module, adapter)
        torch.backends.cuda.preferred_blas_library("cublas" if name.endswith("_cublas") else default_blas)
        if floor:
            return floor_step
        return (
            step_with(copies)
            if name.startswith("copies")
            else step_with(grouped)
            if name == "grouped"
            else adapted_step
        )

    def gradients(step):
        step()
        return [p.grad.clone() for p in run.trained.adapters.parameters()]

    default_blas = torch.backends.cuda.preferred_blas_library()
    # the adapters' gradients of one batch, layers grouped or alone (bf16: equal up to rounding)
    alone, together = gradients(variant("copies")), gradients(variant("grouped"))
    gradient_difference = max(((a - b).norm() / a.norm()).item() for a, b in zip(alone, together) if a.norm() > 0)
    names = ["floor", "unfused", "fused", "copies", "grouped"]
    times = {name: [] for name in names}
    for _ in range(3):
        for name in names:
            step = variant(name)
            for _ in range(2):
                step()
            events = [torch.cuda.Event(enable_timing=True) for _ in range(9)]
            events[0].record()
            for event in events[1:]:
                step()
                event.record()
            torch.cuda.synchronize()
            times[name] += [a.elapsed_time(b) / 1000 for a, b in zip(events, events[1:])]
    results, tables = {}, []
    for name in names:
        launches, aten, nodes, gpu, table = profiled(variant(name), torch)
        results[name] = {
            "s_per_step": statistics.median(times[name]),
            "s_per_step_rounds": [statistics.median(times[name][i : i + 8]) for i in range(0, 24, 8)],
            "kernel_launches": launches,
            "aten_ops": aten,
            "autograd_nodes": nodes,
            "gpu_busy_s": gpu,
        }
        tables.append(f"== {name}\n{table}")
    layers = len(pairs)
    for name in names[1:]:
        for key in ("kernel_launches", "aten_ops", "autograd_nodes"):
            results[name][key + "_per_layer_over_floor"] = (results[name][key] - results["floor"][key]) / layers
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "comfyui": host_version(),
        "commit": os.environ.get("COMMIT", ""),
        "model": "sdxl 1024² batch 1, rank 16 attention (forward + backward only)",
        "adapted_layers": layers,
        "shared_input_groups": len(grouped.groups),
        "grouped_layers": sum(len(group.members) for group in grouped.groups),
        "grouped_gradients_max_relative_difference": gradient_difference,
        "results": results,
    }
    out = os.environ.get("OUT", "/tmp")
    with open(os.path.join(out, "eager_step.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(out, "eager_step_profile.txt"), "w") as f:
        f.write("\n".join(tables))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
