"""The flow estimator's graph wrapper off CUDA (the GPU test in test_cosyvoice_gpu.py checks the replays).

On a CPU it must be a pass-through: upstream's flow calls it as its estimator and reads attributes off it. The
mask stand-in used while capturing equals upstream's mask; recapture waits until no request runs."""

from __future__ import annotations

import sys
import types

import pytest
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


def _upstream_like_mask(xs: torch.Tensor, masks: torch.Tensor, dynamic: bool, dynamic_left: bool, decoding: int,
                        static: int, left: int, full: bool = True) -> torch.Tensor:  # fmt: skip
    """Upstream's logic, written out by loops: the static chunk mask, then all-false rows set true after a sync."""
    chunk = masks.clone()
    if static > 0:
        length = xs.size(1)
        visible = [[key < (query // static + 1) * static for key in range(length)] for query in range(length)]
        chunk = masks & torch.tensor(visible).unsqueeze(0)
    if (chunk.sum(dim=-1) == 0).sum().item() != 0:
        chunk[chunk.sum(dim=-1) == 0] = True
    return chunk


def test_the_capturable_mask_equals_upstreams_without_its_host_sync() -> None:
    """Upstream's ``add_optional_chunk_mask`` sets all-false rows true after an ``.item()`` test; the stand-in
    used while capturing gives the same mask, whole (padding only) and streamed (static chunks of 2 and 3 frames,
    a padded tail), and leaves dynamic chunks (training) to the original."""
    module = types.ModuleType("fake_decoder_module")
    dynamic_calls: list[bool] = []

    def upstream_like(*args: object) -> torch.Tensor:
        dynamic_calls.append(bool(args[2]))
        return _upstream_like_mask(*args)  # type: ignore[arg-type]

    module.add_optional_chunk_mask = upstream_like  # type: ignore[attr-defined]
    estimator = type("Estimator", (torch.nn.Module,), {"__module__": module.__name__})()
    sys.modules[module.__name__] = module
    try:
        masks = torch.tensor([[[True, True, True, True, True, False, False]], [[False] * 7]])
        xs = torch.zeros(2, 7, 4)
        with _capturable_masks(estimator):
            stand_in = module.add_optional_chunk_mask  # type: ignore[attr-defined]
            for static in (0, 2, 3):
                expected = _upstream_like_mask(xs, masks, False, False, 0, static, -1)
                assert torch.equal(stand_in(xs, masks, False, False, 0, static, -1), expected), static
            assert dynamic_calls == []
            stand_in(xs, masks, True, False, 0, 0, -1)
        assert dynamic_calls == [True] and module.add_optional_chunk_mask is upstream_like  # type: ignore[attr-defined]
    finally:
        del sys.modules[module.__name__]


def test_the_quiet_gate_runs_its_task_only_when_no_request_runs() -> None:
    gate, ran = QuietGate(), []
    with gate.request(lambda: ran.append("alone")), gate.request(lambda: ran.append("beside another")):
        pass
    with gate.request(lambda: ran.append("alone again")):
        pass
    assert ran == ["alone", "alone again"]


def test_tf32_is_set_only_inside_the_block_and_a_wrong_option_is_one_sentence() -> None:
    """The flow graphs are captured with TF32 matmuls (``flow_tf32``, on by default): the global flag is the
    process's own again afterwards, even after an error, and anything but on/off is refused in one sentence."""
    import pytest

    from voicelab.backends.cosyvoice.backend import create
    from voicelab.backends.cosyvoice.flow_graphs import matmul_tf32
    from voicelab.errors import BackendLoadError
    from voicelab.settings import Settings

    before = torch.backends.cuda.matmul.allow_tf32
    with matmul_tf32(not before):
        assert torch.backends.cuda.matmul.allow_tf32 is (not before)
    assert torch.backends.cuda.matmul.allow_tf32 is before
    with pytest.raises(KeyError), matmul_tf32(not before):
        raise KeyError("a failed capture")
    assert torch.backends.cuda.matmul.allow_tf32 is before
    assert GraphedEstimator(ToyEstimator()).tf32 and not GraphedEstimator(ToyEstimator(), tf32=False).tf32
    with pytest.raises(BackendLoadError, match=r"^CosyVoice backend option: flow_tf32 must be on or off, not 'yes'\.$"):
        create(Settings(backend="cosyvoice", backend_options="flow_tf32=yes"))


def test_flow_half_runs_the_estimator_in_float16_and_answers_in_float32() -> None:
    """``flow_half=on``: the estimator's weights in float16 once, every call cast in and its output cast back, so
    upstream's flow still gets float32 frames, near float32's (a small convolution: within 1e-2 of the scale) and not
    equal to them (the float16 path really ran); the option takes on or off only."""
    import copy

    from voicelab.backends.cosyvoice.backend import create
    from voicelab.errors import BackendLoadError
    from voicelab.settings import Settings

    torch.manual_seed(0)
    toy = ToyEstimator()
    graphed = GraphedEstimator(copy.deepcopy(toy), half=True)
    assert graphed.float16 and graphed.estimator.conv.weight.dtype == torch.float16
    assert not GraphedEstimator(ToyEstimator()).float16
    x, mu = torch.randn(2, 80, 90), torch.randn(2, 80, 90)
    mask, t, spks = torch.ones(2, 1, 90), torch.rand(2), torch.randn(2, 80)
    ours, reference = graphed(x, mask, mu, t, spks, mu), toy(x, mask, mu, t, spks, mu)
    assert ours.dtype == torch.float32
    difference = float((ours - reference).abs().max() / reference.abs().max())
    assert 0 < difference < 1e-2, difference
    with pytest.raises(BackendLoadError, match=r"^CosyVoice backend option: flow_half must be on or off, not '1'\.$"):
        create(Settings(backend="cosyvoice", backend_options="flow_half=1"))


def _tiny_estimator() -> torch.nn.Module:
    """CosyVoice2's flow estimator from upstream's code, one block each, random weights (seed 0)."""
    import io

    from tests.fixture_cosyvoice_llm import require_upstream

    require_upstream()
    from hyperpyyaml import load_hyperpyyaml

    from voicelab.backends.cosyvoice.random_yaml import CFM, COMMON, FLOW2
    from voicelab.backends.cosyvoice.upstream import block_downloads

    block_downloads()
    torch.manual_seed(0)
    text = COMMON + FLOW2.format(cfm=CFM, encoder_blocks=1, mid_blocks=1)
    estimator: torch.nn.Module = load_hyperpyyaml(io.StringIO(text))["flow"].decoder.estimator.eval()
    return estimator


def _estimator_inputs(frames: int, device: str = "cpu") -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(1)
    x, mu, cond = (torch.randn(2, 80, frames, generator=gen) for _ in range(3))
    inputs = (x, torch.ones(2, 1, frames), mu, torch.rand(2, generator=gen), torch.randn(2, 80, generator=gen), cond)
    return tuple(v.to(device) for v in inputs)


def test_flow_half_keeps_upstreams_estimator_within_three_hundredths_of_float32() -> None:
    """CosyVoice2's estimator (upstream's code, small and random) in float16 against float32 on the CPU: its
    velocity within 3e-2 of the output's scale (2.1e-2 measured on 2026-12-05; bfloat16 was 0.25)."""
    import copy

    estimator, inputs = _tiny_estimator(), _estimator_inputs(150)
    with torch.inference_mode():
        reference = estimator(*inputs)
        ours = GraphedEstimator(copy.deepcopy(estimator), half=True)(*inputs)
    assert ours.dtype == torch.float32
    difference = float((ours - reference).abs().max() / reference.abs().max())
    assert 0 < difference < 3e-2, difference


@pytest.mark.gpu
def test_on_cuda_float16_graphs_are_captured_replay_padded_calls_and_stay_near_float32() -> None:
    """On CUDA with ``half``: every bucket captured in float16 (the capture's own check: a padded replay equals the
    eager float16 call), a call of 150 and of 600 frames answers float32 frames within 3e-2 of float32's scale."""
    import copy

    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA")
    estimator = _tiny_estimator().cuda()
    graphed = GraphedEstimator(copy.deepcopy(estimator), half=True)
    with torch.inference_mode():
        assert graphed.capture_all() > 0
        assert all(report.kept or report.eager_ms <= report.graph_ms for report in graphed.reports)
        for frames in (150, 600):
            inputs = _estimator_inputs(frames, "cuda")
            reference, ours = estimator(*inputs), graphed(*inputs)
            assert ours.dtype == torch.float32
            difference = float((ours - reference).abs().max() / reference.abs().max())
            assert 0 < difference < 3e-2, (frames, difference)
