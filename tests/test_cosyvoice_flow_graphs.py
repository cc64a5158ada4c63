"""The flow estimator's graph wrapper off CUDA (the GPU test in test_cosyvoice_gpu.py checks the replays).

On a CPU it must be a pass-through: upstream's flow calls it as its estimator and reads attributes off it. The
mask stand-in used while capturing equals upstream's mask; recapture waits until no request runs."""

from __future__ import annotations

import sys
import types

import torch

from voicelab.backends.cosyvoice.flow_graphs import GraphedEstimator, _capturable_masks, install_flow_graphs
from voicelab.backends.cosyvoice.request_watch import QuietGate


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


def test_the_capturable_mask_equals_upstreams_without_its_host_sync() -> None:
    """Upstream's ``add_optional_chunk_mask`` (no chunks) sets all-false rows true after an ``.item()`` test; the
    stand-in used while capturing gives the same mask, and leaves chunked calls to the original."""
    module = types.ModuleType("fake_decoder_module")
    chunked: list[int] = []

    def upstream_like(xs: torch.Tensor, masks: torch.Tensor, dynamic: bool, dynamic_left: bool, decoding: int,
                      static: int, left: int, full: bool = True) -> torch.Tensor:  # fmt: skip
        if static > 0:
            chunked.append(static)
            return masks
        chunk = masks.clone()
        if (chunk.sum(dim=-1) == 0).sum().item() != 0:
            chunk[chunk.sum(dim=-1) == 0] = True
        return chunk

    module.add_optional_chunk_mask = upstream_like  # type: ignore[attr-defined]
    estimator = type("Estimator", (torch.nn.Module,), {"__module__": module.__name__})()
    sys.modules[module.__name__] = module
    try:
        masks = torch.tensor([[[True, True, False, False]], [[False, False, False, False]]])
        with _capturable_masks(estimator):
            during = module.add_optional_chunk_mask(None, masks, False, False, 0, 0, -1)  # type: ignore[attr-defined]
            module.add_optional_chunk_mask(None, masks, False, False, 0, 50, -1)  # type: ignore[attr-defined]
        assert torch.equal(during, upstream_like(None, masks, False, False, 0, 0, -1))  # type: ignore[arg-type]
        assert chunked == [50] and module.add_optional_chunk_mask is upstream_like  # type: ignore[attr-defined]
    finally:
        del sys.modules[module.__name__]


def test_the_quiet_gate_runs_its_task_only_when_no_request_runs() -> None:
    gate, ran = QuietGate(), []
    with gate.request(lambda: ran.append("alone")), gate.request(lambda: ran.append("beside another")):
        pass
    with gate.request(lambda: ran.append("alone again")):
        pass
    assert ran == ["alone", "alone again"]
