"""What block swap inside CUDA graphs needs from PyTorch and the driver, asked in one GPU call before it
is built (issue 42: SDXL's and Flux's resident steps are graphed; block swap turns graphs off). Each
probe captures a small graph the way the engine would and replays it against the eager result:

- pinned_copy: a non-blocking host-to-device copy of a pinned buffer inside a capture (the ring's copy);
- side_stream: that copy on a stream of its own, forked from the capturing stream by an event and
  joined back by another, the compute waiting on it (the ring's ordering);
- graphed_callables: torch.cuda.make_graphed_callables over a module whose forward copies its weight
  in on a side stream before computing, forward and backward captured as the training step is;
- refreshed_host: the replay reads the host buffer as it is at replay time (the graph holds the
  address, not the values): the host copy is changed after capture and the replay must see it.

Prints `RESULT {json}` per probe (ok, error, max difference) and writes $OUT/graph_swap_probe.json.
Its answer on an H200 (bench/results/2026-11-28_graph_swap_probe_h200.json): the first three hold;
graphed_callables failed on this probe's own eager backward (its AccumulateGrad node, made on the
default stream, kept alive by `eager_out`), not on the engine, whose captures the GPU tests of
tests/training/memory run.

    OUT=... python bench/graph_swap_probe.py
"""

import json
import os
import traceback


def probe(name, fn, results):
    try:
        diff = fn()
        results[name] = {"ok": diff == 0.0, "max_abs_diff": diff}
    except Exception as error:  # each probe's failure is its finding
        results[name] = {
            "ok": False,
            "error": f"{type(error).__name__}: {error}"[:400],
            "where": traceback.format_exc()[-600:],
        }
    print("RESULT", json.dumps({name: results[name]}), flush=True)


def main():
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("graph_swap_probe needs a CUDA device")
    device = torch.device("cuda")
    n = 1 << 20
    host = torch.randn(n, pin_memory=True)
    slot = torch.empty(n, device=device)
    x = torch.randn(n, device=device)
    copier = torch.cuda.Stream()
    results = {}

    def pinned_copy():
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            slot.copy_(host, non_blocking=True)
            out = slot * x
        slot.zero_()
        graph.replay()
        torch.cuda.synchronize()
        return (out - host.to(device) * x).abs().max().item()

    def side_stream():
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forked = torch.cuda.Event()
            forked.record()
            copier.wait_event(forked)
            with torch.cuda.stream(copier):
                slot.copy_(host, non_blocking=True)
                ready = torch.cuda.Event()
                ready.record(copier)
            torch.cuda.current_stream().wait_event(ready)
            out = slot * x
        slot.zero_()
        graph.replay()
        torch.cuda.synchronize()
        return (out - host.to(device) * x).abs().max().item()

    def refreshed_host():
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            slot.copy_(host, non_blocking=True)
            out = slot * 2
        host.mul_(3)
        graph.replay()
        torch.cuda.synchronize()
        return (out - host.to(device) * 2).abs().max().item()

    class Swapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.host = torch.randn(64, 64, pin_memory=True)
            self.slot = torch.empty(64, 64, device=device)
            self.scale = torch.nn.Parameter(torch.ones(64, device=device))

        def forward(self, h):
            forked = torch.cuda.Event()
            forked.record()
            copier.wait_event(forked)
            with torch.cuda.stream(copier):
                self.slot.copy_(self.host, non_blocking=True)
                ready = torch.cuda.Event()
                ready.record(copier)
            torch.cuda.current_stream().wait_event(ready)
            return (h @ self.slot.t()) * self.scale

    def graphed_callables():
        module = Swapped()
        h = torch.randn(8, 64, device=device, requires_grad=True)
        eager_out = module(h)
        eager_out.sum().backward()
        eager_grad = module.scale.grad.clone()
        module.scale.grad = None
        graphed = torch.cuda.make_graphed_callables(module, (h.detach().requires_grad_(),))
        module.slot.zero_()
        out = graphed(h)
        out.sum().backward()
        torch.cuda.synchronize()
        return max((out - eager_out).abs().max().item(), (module.scale.grad - eager_grad).abs().max().item())

    for name, fn in (
        ("pinned_copy", pinned_copy),
        ("side_stream", side_stream),
        ("refreshed_host", refreshed_host),
        ("graphed_callables", graphed_callables),
    ):
        probe(name, fn, results)
    summary = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "probes": results}
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "graph_swap_probe.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
