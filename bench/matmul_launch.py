"""The host's cost of launching one small matrix product, per BLAS library PyTorch can route it to.

Without CUDA graphs an adapted layer's step is paced by the CPU, and its products (a LoRA adds six
per layer, forward and backward) were the largest share of that CPU time in bench/eager_step.py's
profile (aten::mm and aten::addmm at 35-50 µs each on the lent H100's host). This times the launch
of the LoRA products of an SDXL attention layer (4096 tokens, 640 wide, rank 16, bf16) through
cuBLAS and through cuBLASLt (`torch.backends.cuda.preferred_blas_library`), interleaved in rounds,
as host microseconds per call with the GPU kept ahead (its work per call is a few microseconds), and
the ratio of the two in the same run. Prints JSON and writes $OUT/matmul_launch.json.

    python bench/matmul_launch.py
"""

import json
import os
import statistics
import time

import torch

CALLS, ROUNDS = 2000, 5


def products(device):
    """{name: call} of the products a LoRA adds to a 640-wide layer, at 4096 tokens, rank 16."""
    g = torch.Generator(device=device).manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device=device, dtype=torch.bfloat16, generator=g)

    x, grad, hidden = rand(4096, 640), rand(4096, 640), rand(4096, 16)
    down, up, out = rand(16, 640), rand(640, 16), rand(4096, 640)
    return {
        "mm x·downᵀ": lambda: torch.mm(x, down.t()),
        "addmm_ out += hidden·upᵀ": lambda: out.addmm_(hidden, up.t()),
        "addmm grad·up (beta 0)": lambda: torch.addmm(hidden, grad, up, beta=0, alpha=0.5),
        "mm hiddenᵀ·x (∂down)": lambda: torch.mm(hidden.t(), x),
    }


def host_us_per_call(call):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        call()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    return host / CALLS * 1e6


def main():
    device = torch.device("cuda")
    calls = products(device)
    libraries = ["cublas", "cublaslt"]
    times = {lib: {name: [] for name in calls} for lib in libraries}
    for _ in range(ROUNDS):
        for lib in libraries:
            torch.backends.cuda.preferred_blas_library(lib)
            for name, call in calls.items():
                host_us_per_call(call)  # warm-up: heuristics, workspaces
                times[lib][name].append(host_us_per_call(call))
    medians = {lib: {name: statistics.median(v) for name, v in per.items()} for lib, per in times.items()}
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "commit": os.environ.get("COMMIT", ""),
        "host_us_per_call": medians,
        "cublaslt_over_cublas": {name: medians["cublaslt"][name] / medians["cublas"][name] for name in calls},
    }
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "matmul_launch.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
