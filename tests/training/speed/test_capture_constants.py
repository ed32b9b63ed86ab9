"""Constants a forward copies over from CPU memory (torch.arange(n).to(x.device), torch.tensor of
Python numbers for the GPU, lists of ints indexing a GPU tensor) break a CUDA-graph capture; under
made_on the graph holds them and replays them. Needs a CUDA device (run on the GPU machine: see bench/gpu_host.sh)."""

import pytest
import torch

from eridiffusion.training.speed.capture_constants import made_on

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


def forward(x):
    steps = torch.arange(4).to(x.device)  # Wan's timestep embedding does this
    offsets = torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)  # LTX-Video's patch coordinates this
    return x * steps + offsets + torch.tensor(0.5, device=x.device)


def last_tokens(x):
    return x[list(range(x.shape[0])), [2, 0]]  # CLIP's pooled output: each row's last token, this way


def captured(x, fn=forward):
    """fn(x) captured as a CUDA graph (after a warm-up on a side stream), and its output."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(x)
    return graph, out


def test_under_made_on_the_graph_holds_the_constants_and_replays_them():
    x = torch.ones(4, device="cuda")
    with made_on(torch.device("cuda")):
        graph, out = captured(x)
    x.copy_(torch.tensor([5.0, 6.0, 7.0, 8.0]))
    graph.replay()
    torch.cuda.synchronize()
    assert out.tolist() == [1.5, 8.5, 17.5, 28.5]  # x * [0, 1, 2, 3] + [1, 2, 3, 4] + 0.5


def test_without_it_the_copies_break_the_capture():
    with pytest.raises(RuntimeError, match="Cannot copy between CPU and CUDA tensors during CUDA graph capture"):
        captured(torch.ones(4, device="cuda"))


def test_list_indices_of_a_gpu_tensor_replay_the_rows_they_picked():
    x = torch.zeros(2, 3, device="cuda")
    with made_on(torch.device("cuda")):
        graph, out = captured(x, last_tokens)
    x.copy_(torch.arange(6.0).reshape(2, 3))
    graph.replay()
    torch.cuda.synchronize()
    assert out.tolist() == [2.0, 3.0]


def test_without_it_list_indices_break_the_capture():
    with pytest.raises(RuntimeError, match="Cannot copy between CPU and CUDA tensors during CUDA graph capture"):
        captured(torch.zeros(2, 3, device="cuda"), last_tokens)


def numpy_table(x):
    import numpy

    table = torch.from_numpy(numpy.arange(1000, dtype=numpy.float32))  # Hunyuan-DiT's RoPE grid does this
    return x + table.to(x.device)[: x.shape[0]] + table.cuda()[-1]


def test_a_large_cpu_table_moved_to_the_gpu_replays_from_its_kept_pinned_copy():
    x = torch.zeros(4, device="cuda")
    with made_on(torch.device("cuda")) as pinned:
        graph, out = captured(x, numpy_table)
    assert len(pinned) == 2 and all(p.is_pinned() for p in pinned)  # the capture's .to and .cuda
    x.copy_(torch.tensor([5.0, 6.0, 7.0, 8.0]))
    graph.replay()
    torch.cuda.synchronize()
    assert out.tolist() == [1004.0, 1006.0, 1008.0, 1010.0]  # x + [0, 1, 2, 3] + 999


def test_without_it_the_table_breaks_the_capture():
    with pytest.raises(RuntimeError, match="Cannot copy between CPU and CUDA tensors during CUDA graph capture"):
        captured(torch.zeros(4, device="cuda"), numpy_table)
