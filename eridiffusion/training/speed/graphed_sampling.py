"""Samples rendered during training replay the sampler's model calls from CUDA graphs: in eager
mode each call of a graphed run's model (the frozen layers and the adapters' bypass products)
is launch-bound, an SDXL sampling step at 1024² taking about 0.17 s on an H100 for some 0.03 s
of GPU work. One graph per input layout (shapes, dtypes and the call's plain values) is captured
at the first call that has it, in a memory pool of its own that goes when the render ends.

A call the graphs cannot hold as they are (a conditioning with ControlNets or model patches, whose
work may change from step to step in Python; non-tensor inputs) runs eagerly, as does every call
after a capture fails (with one warning)."""

import collections
import contextlib
import logging

import torch

from ...errors import first_line

WRAPPER = "model_function_wrapper"
# transformer_options keys whose values change the model's work in Python (patches, replaced blocks,
# wrappers around its parts): such a call is not replayed
_PYTHON_WORK = ("patches", "patches_replace", "wrappers", "callbacks")
WARMUP_CALLS = 2
# the name prefixes of the conditioning's and the transformer_options' tensors among a call's inputs
CONDITIONING, OPTION = "c.", "transformer_options."


class SamplingGraphs:
    """A ComfyUI model_function_wrapper that replays apply_model from CUDA graphs."""

    def __init__(self):
        self.graphs = {}  # layout key -> (graph, static inputs, static output)
        self.pool = torch.cuda.graph_pool_handle()
        self.failed = None
        self.captures = self.replays = 0
        self.eager: collections.Counter[str] = collections.Counter()  # why calls ran eagerly: {reason: calls}

    def __call__(self, apply_model, args):
        x, timestep, c = args["input"], args["timestep"], args["c"]
        key, tensors = self._layout(x, timestep, c)
        if key is None or self.failed is not None:
            self.eager[tensors if key is None else "a capture failed"] += 1
            return apply_model(x, timestep, **c)
        if key not in self.graphs:
            try:
                self.graphs[key] = self._capture(apply_model, tensors, c)
            except RuntimeError as error:  # torch.AcceleratorError too
                torch.cuda.synchronize()
                self.failed = error
                logging.warning(
                    f"EriDiffusion: samples render without CUDA graphs from here on: capturing the "
                    f"sampler's model call failed ({first_line(error)})."
                )
                return apply_model(x, timestep, **c)
            self.captures += 1
        graph, static_in, static_out = self.graphs[key]
        for name, tensor in tensors.items():
            static_in[name].copy_(tensor)
        graph.replay()
        self.replays += 1
        return static_out.clone()  # the sampler keeps outputs across calls; the graph's is overwritten

    @staticmethod
    def _layout(x, timestep, c):
        """(key, {name: tensor}) of a call the graphs can hold, else (None, why not). The tensors are the
        call's inputs, its conditioning's (on any device) and its transformer_options' GPU tensors (the
        step's sigmas)."""
        options = c.get("transformer_options", {})
        held = [name for name in _PYTHON_WORK if _holds_a_function(options.get(name))]
        if held or c.get("control") is not None:
            return None, f"model {held[0] if held else 'control'} in its transformer_options"
        tensors = {"input": x, "timestep": timestep}
        plain = []
        for name, value in c.items():
            if isinstance(value, torch.Tensor):
                tensors[CONDITIONING + name] = value
            elif name != "transformer_options":
                if not isinstance(value, (int, float, str, bool, type(None))):
                    return None, f"a {type(value).__name__} input ({name})"
                plain.append((name, value))
        if x.device.type != "cuda":
            return None, "a sampler running off the GPU"
        for name, value in options.items():
            if isinstance(value, torch.Tensor) and value.device.type == "cuda":
                tensors[OPTION + name] = value
        key = tuple((n, tuple(t.shape), t.dtype) for n, t in sorted(tensors.items())) + tuple(sorted(plain))
        key += (tuple(options.get("cond_or_uncond", ())),)
        return key, tensors

    def _capture(self, apply_model, tensors, c):
        # (ComfyUI keeps the conditioning on its intermediate device, the CPU, and apply_model moves
        # it over: its graph copies are made on the GPU, which each call's copy_ fills)
        static_in = {name: t.to(tensors["input"].device, copy=True) for name, t in tensors.items()}
        inputs, options = dict(c), dict(c.get("transformer_options", {}))
        for name, tensor in static_in.items():
            if name.startswith(CONDITIONING):
                inputs[name[len(CONDITIONING) :]] = tensor
            elif name.startswith(OPTION):
                options[name[len(OPTION) :]] = tensor
        if "transformer_options" in c:
            inputs["transformer_options"] = options

        def call():
            return apply_model(static_in["input"], static_in["timestep"], **inputs)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):  # (lazy inits, cuBLAS workspaces) outside the capture
                call()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            static_out = call()
        return graph, static_in, static_out


def _holds_a_function(value):
    """Whether a (nested) dict or list of ComfyUI's patches, wrappers or callbacks holds any."""
    if isinstance(value, dict):
        return any(_holds_a_function(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_a_function(v) for v in value)
    return value is not None


@contextlib.contextmanager
def graphed_sampling(patcher):
    """While rendering samples with `patcher`: its sampler's model calls replay from CUDA graphs
    (unless the MODEL already carries a model_function_wrapper of its own, which is left to run).
    Yields the SamplingGraphs, or None."""
    options = patcher.model_options
    if WRAPPER in options or not torch.cuda.is_available() or patcher.load_device.type != "cuda":
        yield None
        return
    graphs = SamplingGraphs()
    options[WRAPPER] = graphs
    try:
        yield graphs
    finally:
        del options[WRAPPER]
        graphs.graphs.clear()  # (their memory pool with them)
    for reason, calls in graphs.eager.items():
        logging.info(f"EriDiffusion: {calls} of the samples' model calls ran without CUDA graphs: {reason}.")
