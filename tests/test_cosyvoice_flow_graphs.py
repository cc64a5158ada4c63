"""The flow estimator's graph wrapper off CUDA (the GPU test in test_cosyvoice_gpu.py checks the replays).

On a CPU it must be a pass-through: upstream's flow calls it as its estimator and reads attributes off it."""

from __future__ import annotations

import torch

from voicelab.backends.cosyvoice.flow_graphs import GraphedEstimator, install_flow_graphs


class ToyEstimator(torch.nn.Module):
    static_chunk_size = 50

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(80, 80, 3, padding=1)

    def forward(self, x, mask, mu, t, spks=None, cond=None, streaming=False):  # type: ignore[no-untyped-def]
        return self.conv(x * mask + mu) * mask


class ToyFlow(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.decoder = torch.nn.Module()
        self.decoder.estimator = ToyEstimator()


def test_on_cpu_the_wrapper_is_the_estimator_and_is_not_installed() -> None:
    toy = ToyEstimator()
    graphed = GraphedEstimator(toy)
    x, mu = torch.randn(2, 80, 90), torch.randn(2, 80, 90)
    mask, t, spks = torch.ones(2, 1, 90), torch.rand(2), torch.randn(2, 80)
    assert torch.equal(graphed(x, mask, mu, t, spks, mu), toy(x, mask, mu, t, spks, mu))
    assert graphed.static_chunk_size == 50 and graphed.captured == {} and graphed.release() == 0
    flow = ToyFlow()
    assert install_flow_graphs(flow) is None and isinstance(flow.decoder.estimator, ToyEstimator)
