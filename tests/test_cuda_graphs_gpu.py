"""What every graph set shares (``backends/cuda_graphs.py``) on CUDA: one side stream for all its warm-ups and
captures, so cuBLAS keeps one workspace for the set instead of one per bucket (it keeps one per stream for the life
of the process, 32 MiB and more each on Hopper). Needs an NVIDIA GPU; skipped without one."""

from __future__ import annotations

import pytest

from voicelab.backends.cuda_graphs import SideStream, capture, warm_up

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def test_a_set_of_graphs_warms_up_and_captures_on_one_stream_and_one_cublas_workspace() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA")
    side = SideStream()
    weight = torch.randn(512, 512, device="cuda")
    inputs = [torch.randn(rows, 512, device="cuda") for rows in (1, 8, 16, 32, 64, 128, 256, 512, 1024)]
    pool, graphs = None, []
    for index, x in enumerate(inputs):
        if index == 1:  # the set's stream and its workspaces exist from the first bucket on
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
        warm_up(lambda x=x: x @ weight, side)
        graph, out = capture(lambda x=x: x @ weight, pool, side)
        pool = graph.pool()
        graphs.append((graph, out))
        assert side.stream is side.stream  # one stream for the set, made once
    torch.cuda.synchronize()
    outputs = sum(out.numel() * out.element_size() for _, out in graphs[1:])
    grown = torch.cuda.memory_allocated() - before
    assert grown < outputs + (4 << 20), f"{grown / 2**20:.1f} MiB for {outputs / 2**20:.1f} MiB of outputs"
    for (graph, out), x in zip(graphs, inputs, strict=True):
        graph.replay()
        torch.testing.assert_close(out, x @ weight)
