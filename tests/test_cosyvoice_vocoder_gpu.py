"""CosyVoice2's vocoder graphs on an NVIDIA GPU: each streamed shape captured, a replay upstream's audio from the same
seed (on any stream), Clean cache drops them and they come back; the runtime captures every streamed shape at load
and a streamed request replays them; CosyVoice3's causal vocoder its first chunks alike (a streamed request replays
its first chunk alone). Skipped without CUDA or without the optional install and upstream's checkout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.fixture_cosyvoice_llm import require_upstream
from tests.test_cosyvoice_vocoder import cosyvoice2_hift, streamed_request

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
SHAPES = [(50, 0), (96, 0), (108, 3840), (208, 3840)]


@pytest.fixture(scope="module")
def graphed() -> Any:
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA")
    require_upstream()
    from voicelab.backends.cosyvoice.hift_stft import make_sync_free
    from voicelab.backends.cosyvoice.vocoder_graphs import GraphedVocoder

    hift = cosyvoice2_hift().cuda()
    make_sync_free(hift)
    vocoder = GraphedVocoder(hift, SHAPES)
    vocoder.capture_all()
    return vocoder


def _inputs(frames: int, cached: int) -> tuple[Any, Any]:
    gen = torch.Generator(device="cuda").manual_seed(frames)
    return torch.randn(1, 80, frames, device="cuda", generator=gen), 0.1 * torch.randn(
        1, 1, cached, device="cuda", generator=gen
    )


def test_every_streamed_shape_is_captured_equal_to_upstream_and_faster(graphed: Any) -> None:
    assert sorted(graphed.captured) == sorted(SHAPES)
    assert [r.length for r in graphed.reports] == [frames for frames, _ in SHAPES]
    assert all(r.kept and r.graph_ms < r.eager_ms for r in graphed.reports), graphed.reports


@pytest.mark.parametrize("priority", [0, -1], ids=["default stream", "high-priority stream"])
def test_a_replay_is_upstreams_audio_from_the_same_seed(graphed: Any, priority: int) -> None:
    from voicelab.backends.cosyvoice.vocoder_graphs import TOLERANCE

    stream = torch.cuda.Stream(priority=priority)
    for frames, cached in SHAPES:
        feat, cache = _inputs(frames, cached)
        torch.manual_seed(frames)
        expected, expected_source = graphed.upstream(speech_feat=feat, cache_source=cache)
        torch.manual_seed(frames)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            speech, source = graphed.inference(feat, cache)
        torch.cuda.current_stream().wait_stream(stream)
        scale = float(expected.abs().max())
        assert float((speech - expected).abs().max()) <= TOLERANCE * scale, (frames, cached)
        assert torch.equal(source[:, :, :cached], cache)  # the cached source laid over the start
        assert float((source - expected_source).abs().max()) <= 1e-4


def test_replays_back_to_back_each_keep_their_own_output(graphed: Any) -> None:
    feat, cache = _inputs(108, 3840)
    first, _ = graphed.inference(feat, cache)
    second, _ = graphed.inference(feat * 0.5, cache)
    assert not torch.equal(first, second)  # each caller owns a copy, not the graph's output buffer


def test_release_drops_them_and_capture_all_brings_them_back(graphed: Any) -> None:
    feat, _ = _inputs(50, 0)
    assert graphed.release() == len(SHAPES) and graphed.released and graphed.reports == []
    speech, _ = graphed.inference(feat)  # upstream's eager call meanwhile
    assert speech.shape == (1, 50 * 480)
    assert graphed.capture_all() == len(SHAPES) and not graphed.released


def test_the_runtime_captures_every_streamed_shape_and_a_streamed_request_replays_them(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA")
    runtime, vocoder, replays = _runtime_counting_replays(tmp_path, 2)
    assert len(vocoder.captured) == len(vocoder.shapes) == runtime.hops.first + 2
    assert {r.stage for r in vocoder.reports} == {"vocoder (HiFT), streamed chunk"}
    chunks = streamed_request(runtime, 330)
    assert len(chunks) >= 4 and len(replays) == len(chunks) - 1, replays  # every chunk but the last (172 frames)
    assert all(np.isfinite(c).all() and float(np.abs(c).max()) > 0 for c in chunks)
    runtime.close()


@pytest.fixture(scope="module")
def causal() -> Any:
    """CosyVoice3's causal HiFT behind its first-chunk graphs (two of its 25 shapes), its F0 lifted into the
    voiced range so the sines are in the audio compared."""
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA")
    from tests.test_cosyvoice_vocoder import cosyvoice3_hift
    from voicelab.backends.cosyvoice.causal_vocoder import CausalRecipe
    from voicelab.backends.cosyvoice.hift_stft import make_sync_free
    from voicelab.backends.cosyvoice.vocoder_graphs import GraphedVocoder

    hift = cosyvoice3_hift().cuda()
    with torch.no_grad():
        hift.f0_predictor.classifier.bias.fill_(150.0)
    make_sync_free(hift)
    vocoder = GraphedVocoder(hift, [(50, 0), (96, 0)], CausalRecipe(hift, 98))
    vocoder.capture_all()
    return vocoder


def test_cosyvoice3s_first_chunks_are_captured_equal_to_upstream_and_faster_and_replay_it(causal: Any) -> None:
    from voicelab.backends.cosyvoice.vocoder_graphs import TOLERANCE

    assert sorted(causal.captured) == [(50, 0), (96, 0)], causal.reports
    assert all(r.kept and r.graph_ms < r.eager_ms for r in causal.reports), causal.reports
    assert {r.stage for r in causal.reports} == {"vocoder (causal HiFT), streamed first chunk"}
    for frames in (50, 96):
        feat = torch.randn(1, 80, frames, device="cuda", generator=torch.Generator(device="cuda").manual_seed(frames))
        expected, expected_source = causal.upstream(speech_feat=feat, finalize=False)
        speech, source = causal.inference(speech_feat=feat, finalize=False)
        assert speech.shape == expected.shape and source.shape == expected_source.shape
        assert float((speech - expected).abs().max()) <= TOLERANCE * float(expected.abs().max()), frames
        whole, _ = causal.inference(speech_feat=feat, finalize=True)  # a last chunk: upstream's call, other audio
        assert whole.shape != speech.shape


def test_the_cosyvoice3_runtime_captures_its_first_chunks_and_a_streamed_request_replays_one(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA")
    runtime, vocoder, replays = _runtime_counting_replays(tmp_path, 3)
    assert len(vocoder.captured) == len(vocoder.shapes) == runtime.hops.first
    chunks = streamed_request(runtime, 330)
    first_chunk = [frames for frames, _ in vocoder.shapes]
    assert len(chunks) >= 3 and len(replays) == 1 and replays[0] in first_chunk, replays  # the first chunk alone
    assert all(np.isfinite(c).all() and float(np.abs(c).max()) > 0 for c in chunks)
    runtime.close()


def _runtime_counting_replays(tmp_path: Path, version: int) -> tuple[Any, Any, list[int]]:
    """The tiny random CosyVoice ``version`` loaded on CUDA, its vocoder graphs, and the mel lengths they replay."""
    from voicelab.backends.cosyvoice.random_model import write_model
    from voicelab.backends.cosyvoice.upstream import load_runtime

    code = str(require_upstream())
    model = write_model(tmp_path / f"cv{version}", version, tiny=True, device="cuda")
    runtime = load_runtime(model, code, "cuda", "float32", None)
    vocoder = runtime.vocoder_graphs
    assert vocoder is not None
    replays: list[int] = []
    replay = vocoder._replay

    def counted(entry: Any, feat: Any, options: Any) -> Any:
        replays.append(int(feat.shape[2]))
        return replay(entry, feat, options)

    vocoder._replay = counted  # type: ignore[method-assign]
    return runtime, vocoder, replays
