"""The frozen product of one adapted linear layer, bf16 against fp8 (training/speed/fp8_products.py),
for the layer shapes of full-size Flux.1-dev and SDXL at 1024²: forward (x·Wᵀ + b) and input
gradient (g·W), each as the trainer runs it (the fp8 one with its activation or gradient scaling,
in fp8_scaling's Triton kernels, with the column-major copy of the weight made once), the bare
fp8 products, the scaling in eager kernels and its pieces beside. GPU times
from CUDA events over replays of a CUDA graph of each (as the trainer replays its steps), medians of
5 rounds. Prints one `RESULT {json}` line and writes $OUT/fp8_products.json.

    python bench/fp8_products.py
"""

import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# (name, rows, in, out) at 1024², batch 1
SHAPES = [
    ("flux double img qkv", 4096, 3072, 9216),
    ("flux double img proj", 4096, 3072, 3072),
    ("flux double img mlp.0", 4096, 3072, 12288),
    ("flux double img mlp.2", 4096, 12288, 3072),
    ("flux double txt qkv", 512, 3072, 9216),
    ("flux single linear1", 4608, 3072, 21504),
    ("flux single linear2", 4608, 15360, 3072),
    ("sdxl attn (level 1)", 4096, 640, 640),
    ("sdxl attn (level 2)", 1024, 1280, 1280),
    ("sdxl ff.0 (level 1)", 4096, 640, 5120),
    ("sdxl ff.2 (level 1)", 4096, 2560, 640),
    ("sdxl ff.0 (level 2)", 1024, 1280, 10240),
]


def graph_time(fn, replays=20, rounds=5):
    """Median GPU seconds of one call of `fn`, replayed from a CUDA graph."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(replays):
            fn()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000 / replays)
    return statistics.median(times)


def measure_layer(name, rows, fan_in, fan_out):
    """The timings of one layer shape (see the module's docstring), in seconds."""
    import torch

    from eridiffusion.training.speed.fp8_products import E4M3, E5M2, Fp8Linear, quantized, quantized_eagerly

    x = torch.randn(rows, fan_in, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(rows, fan_out, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(fan_out, fan_in, device="cuda", dtype=torch.bfloat16) * 0.02
    b = torch.randn(fan_out, device="cuda", dtype=torch.bfloat16)
    w8, w_scale = quantized(w, E4M3)
    x8, x_scale = quantized(x, E4M3)
    g8, g_scale = quantized(g, E5M2)
    w8_columns = w8.t().contiguous().t()

    class Saved:  # what Fp8Linear's autograd context holds for its backward
        needs_input_grad = (True, False, False, False, False)
        saved_tensors = (w8_columns, w_scale)
        input_shape = x.shape

        def save_for_backward(self, *tensors):
            pass

    ctx = Saved()
    bf16 = torch.bfloat16
    r = {
        "layer": name,
        "shape": [rows, fan_in, fan_out],
        "bf16_forward_s": graph_time(lambda: torch.addmm(b, x, w.t())),
        "bf16_input_grad_s": graph_time(lambda: torch.mm(g, w)),
        "fp8_forward_s": graph_time(lambda: Fp8Linear.forward(ctx, x, w8, w8_columns, w_scale, b)),
        "fp8_input_grad_s": graph_time(lambda: Fp8Linear.backward(ctx, g)),
        "fp8_bare_forward_s": graph_time(
            lambda: torch._scaled_mm(x8, w8.t(), x_scale, w_scale, bias=b, out_dtype=bf16)
        ),
        "fp8_bare_forward_fast_accum_s": graph_time(
            lambda: torch._scaled_mm(x8, w8.t(), x_scale, w_scale, bias=b, out_dtype=bf16, use_fast_accum=True)
        ),
        "fp8_bare_input_grad_s": graph_time(lambda: torch._scaled_mm(g8, w8_columns, g_scale, w_scale, out_dtype=bf16)),
        "quantize_activation_s": graph_time(lambda: quantized(x, E4M3)),
        "quantize_activation_eager_s": graph_time(lambda: quantized_eagerly(x, E4M3)),
        "quantize_gradient_s": graph_time(lambda: quantized(g, E5M2)),
        "quantize_gradient_eager_s": graph_time(lambda: quantized_eagerly(g, E5M2)),
        "weight_column_copy_s": graph_time(lambda: w8.t().contiguous()),
    }
    # the pieces of an activation's scaling, each alone
    inv = x_scale.reciprocal()
    inv_bf16 = inv.to(bf16)
    q = torch.empty(x.shape, dtype=E4M3, device="cuda")
    r["pieces"] = {
        "amax_vector_norm_fp32_s": graph_time(
            lambda: torch.linalg.vector_norm(x, ord=float("inf"), dtype=torch.float32)
        ),
        "amax_vector_norm_s": graph_time(lambda: torch.linalg.vector_norm(x, ord=float("inf"))),
        "amax_aminmax_s": graph_time(lambda: torch.aminmax(x)),
        "amax_abs_amax_s": graph_time(lambda: x.abs().amax()),
        "scale_from_amax_s": graph_time(lambda: quantized(x[:16, :16], E4M3)),
        "mul_into_fp8_s": graph_time(lambda: torch.mul(x, inv, out=q)),
        "mul_bf16_into_fp8_s": graph_time(lambda: torch.mul(x, inv_bf16, out=q)),
        "mul_then_cast_s": graph_time(lambda: torch.mul(x, inv_bf16).to(E4M3)),
        "cast_only_s": graph_time(lambda: x.to(E4M3)),
        "copy_into_fp8_s": graph_time(lambda: q.copy_(x)),
    }
    r["fp8_over_bf16"] = (r["fp8_forward_s"] + r["fp8_input_grad_s"]) / (r["bf16_forward_s"] + r["bf16_input_grad_s"])
    return r


def microseconds(r):
    return {
        k: (round(v * 1e6, 1) if k.endswith("_s") else microseconds(v) if isinstance(v, dict) else v)
        for k, v in r.items()
    }


def main():
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-bench-")
    import torch

    torch.manual_seed(0)
    layers = []
    for shape in SHAPES:
        r = measure_layer(*shape)
        layers.append(r)
        print(json.dumps(microseconds(r)), flush=True)
    from eridiffusion.training.speed.fp8_products import scaling_failure

    summary = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "scaling": "eager kernels: " + scaling_failure() if scaling_failure() else "fused (fp8_scaling, Triton)",
        "layers": layers,
    }
    print("RESULT", json.dumps(summary))
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "fp8_products.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
