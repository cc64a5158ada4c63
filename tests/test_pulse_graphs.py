"""``pulse.analyse`` from CUDA graphs: a bucket captured on its second use, the same analysis as eager, reported for
the panel and released by Clean cache; on a CPU the analyser is the eager one."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from voicelab.backends.cuda_graphs import bucket_for
from voicelab.engine.voicing import VoiceStage
from voicelab.voice import pulse, pulse_graphs
from voicelab.voice.dsp import VoiceTransform, apply_transforms, padded_rows
from voicelab.voice.pulse_graphs import FRAME_LADDER, ROW_BUCKETS, AnalysisGraphs

DATA = Path(__file__).parent / "data"


def _batch(device: str, cuts: tuple[float, ...]) -> tuple[torch.Tensor, torch.Tensor, int]:
    speech, sr = sf.read(DATA / "arctic_awb_en_male.wav", dtype="float32")
    pieces = [speech[: int(cut * sr)] for cut in cuts]
    return padded_rows(pieces).to(device), torch.tensor([len(p) for p in pieces], device=device), sr


def _close(a: pulse.PulseFeatures, b: pulse.PulseFeatures) -> None:
    assert a.f0.shape == b.f0.shape and a.envelope.shape == b.envelope.shape
    torch.testing.assert_close(a.f0, b.f0, rtol=1e-4, atol=1e-3)
    log_a, log_b = (torch.log10(f.envelope.clamp_min(1e-30)) for f in (a, b))
    torch.testing.assert_close(log_a, log_b, rtol=0, atol=2e-3)  # 0.02 dB
    torch.testing.assert_close(a.aperiodicity, b.aperiodicity, rtol=0, atol=1e-3)


def test_the_frame_ladder_is_recurring_buckets_about_a_quarter_apart() -> None:
    assert all(f % pulse.FRAME_BUCKET == 0 for f in FRAME_LADDER)
    steps = [b / a for a, b in itertools.pairwise(FRAME_LADDER)]
    assert all(1.1 < step < 1.45 for step in steps)
    assert FRAME_LADDER[-1] * pulse.FRAME_S > 12  # a chunk of a few sentences fits


def test_a_cpu_stage_analyses_eagerly_and_reports_no_graphs() -> None:
    stage = VoiceStage("cpu", 2, "pulse")
    assert stage.graphs is None and stage.analyser is pulse.analyse and stage.graph_buckets() == ()
    assert VoiceStage("cuda", 2, "pulse").graphs is not None  # made now, captured on the device later
    assert VoiceStage("cuda", 2, "pulse", cuda_graphs=False).graphs is None  # --cuda-graphs false
    assert VoiceStage("cuda", 2, "torch").graphs is None
    x, lengths, sr = _batch("cpu", (1.3,))
    _close(AnalysisGraphs()(x, lengths, sr), pulse.analyse(x, lengths, sr))  # off a GPU it is the eager call


@pytest.mark.gpu
def test_replayed_analysis_equals_eager_and_a_bucket_is_captured_on_its_second_use() -> None:
    graphs = AnalysisGraphs()
    x, lengths, sr = _batch("cuda", (2.1, 1.4, 2.6))
    hop = round(pulse.FRAME_S * sr)
    for captured, rows in enumerate((1, 2, 3)):  # real speech; three rows pad to four, the spare one repeating
        batch, n = x[:rows], lengths[:rows]
        eager = pulse.analyse(batch, n, sr)
        _close(graphs(batch, n, sr), eager)
        assert len(graphs.reports()) == captured  # a shape seen once stays eager
        _close(graphs(batch, n, sr), eager)
        report = graphs.reports()[-1]
        bucket = (bucket_for(ROW_BUCKETS, rows), bucket_for(FRAME_LADDER, pulse.analysis_frames(n, hop)))
        assert (report.rows, report.length) == bucket
        assert report.stage == pulse_graphs.STAGE and report.kept and report.eager_ms > report.graph_ms > 0
        below = max([f for f in FRAME_LADDER if f < report.length], default=0)
        cut = min(int(n.max()) - 1, (below + 1) * hop)  # a shorter batch in the same bucket
        shorter = batch[:, :cut], n.clamp_max(cut)
        assert bucket_for(FRAME_LADDER, pulse.analysis_frames(shorter[1], hop)) == report.length
        _close(graphs(*shorter, sr), pulse.analyse(*shorter, sr))
    held = sum(r.bytes for r in graphs.reports())
    assert len(graphs.reports()) == 3 and held > 0
    assert graphs.release() == held and graphs.reports() == ()


@pytest.mark.gpu
def test_the_cuda_stage_renders_with_its_graphs_as_eager_rendering_does() -> None:
    stage = VoiceStage("cuda", 2, "pulse")
    assert stage.graphs is not None and stage.analyser is stage.graphs
    x, lengths, sr = _batch("cpu", (1.7, 2.2))
    pieces = [row[:n].numpy() for row, n in zip(x, lengths.tolist(), strict=True)]
    moves = [VoiceTransform(pitch_semitones=3.0, formant_factor=1.08), VoiceTransform(f0_target_hz=150.0)]
    eager = apply_transforms(pieces, sr, moves, "cuda", "pulse")
    for _ in range(3):
        replayed = apply_transforms(pieces, sr, moves, "cuda", "pulse", stage.analyser)
    assert [(r.rows, r.kept) for r in stage.graph_buckets()] == [(2, True)]
    for a, b in zip(eager, replayed, strict=True):
        assert float(np.sqrt(np.mean((a - b) ** 2))) < 0.01 * float(np.sqrt(np.mean(a**2)))
    stage.unload()
    assert stage.graph_buckets() == ()
