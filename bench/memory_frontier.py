"""Training under a memory cap with the VRAM budget (block swap as vram_budget_gib plans it), against
the same training uncapped, on full-size architectures with random weights (bench/train_speed.py's
models, files and runs: bf16, rank 16, gradient checkpointing, batch 1, 1024² images; Wan: 480p clips of
33 frames; qwen: Qwen-Image 20B).

Per model and path (MODES: graphed, the default path, where the steps replay from CUDA graphs with
block swap's copies inside them; eager): the uncapped step, then per cap the step with the process
capped to that many GiB (torch.cuda.set_per_process_memory_fraction, as a card of that size) and
vram_budget_gib set to it: the ratio to the uncapped step, the peak memory,
the plan (blocks in the ring, held), whether each step's loss equals the uncapped run's (same seed,
same data: the same weights compute the same products), and the bytes block swap copied from host to
device per step beside the host link's bandwidth, measured in the same process with pinned memory
(how close the copies come to the link's limit). Prints `RESULT {json}` per row and writes
$OUT/memory_frontier.json.

    OUT=... ROWS=sdxl:6,flux:12,wan:24:16 python bench/memory_frontier.py
    OUT=... ROWS=qwen:24:16 MODES=eager,graphed python bench/memory_frontier.py
    OUT=... ROWS=qwen:24fp8,flux2:24fp8:24nf4,klein:12 python bench/memory_frontier.py
    OUT=... UNCAPPED=0 ROWS=flux2:24fp8 python bench/memory_frontier.py   # the capped rows alone
A cap may name the capped row's base weights: 24fp8 (UNETLoader's float8_e4m3fn), 24fp8_scaled (the model's file
as an fp8_scaled checkpoint, train_speed.fp8_scaled_file, loaded as UNETLoader loads it), 24nf4 / 24int8
(MemoryOptions' base_quantization); the uncapped row is bf16. Models as bench/train_speed.py's: sdxl, flux,
wan, qwen, flux2 (Flux.2 dev 32B), klein (Flux.2 klein 9B).
"""

import gc
import json
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import train_speed  # noqa: E402


def link_gb_per_s(gib=2, repeats=5):
    """Host-to-device copies of a pinned buffer, as block swap makes them: GB/s (10^9 bytes)."""
    import torch

    host = torch.empty(gib * 2**30, dtype=torch.uint8, pin_memory=True)
    device = torch.empty_like(host, device="cuda")
    stream = torch.cuda.Stream()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record(stream)
            device.copy_(host, non_blocking=True)
            end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    del host, device
    return host_bytes(gib) / min(times) / 1e9


def host_bytes(gib):
    return gib * 2**30


def run_row(model_name, cap, graphs=False, base="bf16"):
    """One training run of bench/train_speed.ours: uncapped (cap None) or capped with the budget, on base
    weights `base`: bf16, fp8 (UNETLoader's weight_dtype float8_e4m3fn), fp8_scaled (an fp8_scaled checkpoint)
    or nf4 / int8 (base_quantization)."""
    import torch

    total_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    parts = [model_name]
    work = train_speed.Work.of(parts, model_name)
    targets = "attention" if model_name == "sdxl" else "auto"
    started = time.time()
    patcher = None
    try:
        patcher = train_speed.build(model_name, base if base in ("fp8", "fp8_scaled") else "bf16")
        torch.cuda.reset_peak_memory_stats()
        if cap:
            torch.cuda.set_per_process_memory_fraction(cap / total_gib)
        r = train_speed.ours(
            patcher,
            model_name,
            True,
            targets,
            work,
            cuda_graphs=graphs,
            vram_budget_gib=float(cap or 0),
            base_quantization=base if base in ("nf4", "int8") else "none",
        )
    except Exception as error:  # one failure must not hide the other rows
        import traceback

        traceback.print_exc()
        r = {"error": repr(error)[:400]}
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        patcher = None
        import comfy.model_management

        comfy.model_management.unload_all_models()
        gc.collect()
        torch.cuda.empty_cache()
    r.update({"model": model_name, "cap_GiB": cap, "base": base, "cuda_graphs": graphs, **work.record()})
    r["wall_s"] = round(time.time() - started, 1)
    return r


def cap_and_base(spec):
    """A ROWS cap: "24" (24 GiB, the bf16 base), "24fp8", "16nf4", "12int8" (that base for the capped row)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(fp8_scaled|fp8|nf4|int8)?", spec)
    if match is None:
        raise SystemExit(f"ROWS cap {spec!r}: GiB, then fp8, fp8_scaled, nf4, int8 or nothing (bf16), e.g. 24fp8")
    return float(match[1]), match[2] or "bf16"


def compared(row, base, link):
    """The capped row's figures against the uncapped one's."""
    if "s_per_step" not in row or "s_per_step" not in base:
        return row
    row["ratio_to_uncapped"] = row["s_per_step"] / base["s_per_step"]
    pairs = list(zip(row["losses"], base["losses"]))
    row["max_loss_rel_diff"] = max(abs(a - b) / max(abs(b), 1e-12) for a, b in pairs)
    row["losses_equal"] = row["max_loss_rel_diff"] <= 1e-2  # bf16 tolerance
    swap = row.get("block_swap") or {}
    per_forward = swap.get("host_to_device_gib_per_forward")
    if per_forward is not None:
        row["host_to_device_GB_per_step"] = per_forward * 2**30 / 1e9
        row["link_GB_per_s"] = link
        row["link_share"] = row["host_to_device_GB_per_step"] / row["s_per_step"] / link
    return row


def main():
    train_speed.stub_pyav()
    train_speed.load_aimdo()
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-bench-")
    dynamic_vram = train_speed.enable_dynamic_vram()
    link = link_gb_per_s()
    print("RESULT", json.dumps({"link_GB_per_s": link}), flush=True)
    rows = []
    os.makedirs(os.environ.get("OUT", "/tmp"), exist_ok=True)

    def record(row):  # each row as it ends: a call that runs out of time still returns the finished ones
        rows.append(row)
        print("RESULT", json.dumps(row), flush=True)
        with open(os.path.join(os.environ.get("OUT", "/tmp"), "memory_frontier_partial.json"), "w") as f:
            json.dump(rows, f, indent=1)

    modes = os.environ.get("MODES", "graphed").split(",")
    for spec in os.environ.get("ROWS", "sdxl:6,flux:12,wan:24:16").split(","):
        model_name, *caps = spec.split(":")
        for mode in modes:
            graphs = {"graphed": True, "eager": False}[mode]
            base = {}  # UNCAPPED=0: the capped rows alone (a model's uncapped step measured in an earlier call)
            if os.environ.get("UNCAPPED", "1") != "0":
                base = run_row(model_name, None, graphs=graphs)
                record(base)
            for cap in caps:
                gib, weights = cap_and_base(cap)
                record(compared(run_row(model_name, gib, graphs=graphs, base=weights), base, link))
    summary = {**train_speed.run_header(dynamic_vram), "link_GB_per_s": link, "rows": rows}
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "memory_frontier.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
