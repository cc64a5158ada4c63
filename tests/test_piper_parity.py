"""Our PyTorch Piper VITS against onnxruntime running the same .onnx voice (noise off, so both are deterministic)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import onnxruntime as ort
import pytest
import torch

from voicelab.backends.piper.backend import BatchPolicy, PiperBackend, VitsControls, bucket_by_length

TEXTS = {
    "short": "Hi.",
    "long": "The quick brown fox jumps over the lazy dog, and then it runs away into the forest to find its friends.",
    "punctuation": "Wait; that's not right: (really) not right!",
    "numbers": "It costs 42 dollars and 17 cents, on March 3rd, 2021.",
    "question": "Are you coming to the party tonight?",
}
DETERMINISTIC = VitsControls(noise_scale=0.0, length_scale=1.0, noise_w=0.0)


@pytest.fixture(scope="module")
def backend() -> PiperBackend:
    # One batch for everything, so the batch test really pads short sentences next to long ones.
    piper = PiperBackend(batch_policy=BatchPolicy(max_ratio=1000.0, max_padded_ids=100_000))
    piper.load("cpu", "float32")
    return piper


@pytest.fixture(scope="module")
def session(backend: PiperBackend) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    return ort.InferenceSession(str(backend.model_path), options, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def sentence_ids(backend: PiperBackend) -> dict[str, list[int]]:
    ids = {name: backend.text_to_sentences(text) for name, text in TEXTS.items()}
    assert all(len(sentences) == 1 for sentences in ids.values()), "each text should be one sentence"
    return {name: list(sentences[0]) for name, sentences in ids.items()}


def run_onnx(session: ort.InferenceSession, ids: list[int]) -> np.ndarray:
    feed = {
        "input": np.array([ids], dtype=np.int64),
        "input_lengths": np.array([len(ids)], dtype=np.int64),
        "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32),
    }
    return np.asarray(session.run(None, feed)[0]).reshape(-1)


@pytest.mark.parametrize("name", list(TEXTS))
def test_matches_onnxruntime(
    name: str, backend: PiperBackend, session: ort.InferenceSession, sentence_ids: dict[str, list[int]]
) -> None:
    ids = sentence_ids[name]
    expected = run_onnx(session, ids)
    (audio,) = backend.synthesize_ids([ids], DETERMINISTIC, None)
    assert audio.dtype == np.float32
    assert audio.shape == expected.shape, "same predicted durations, so the same number of samples"
    assert np.sqrt(np.mean(expected**2)) > 0.01, "the reference is real speech, not silence"
    assert np.max(np.abs(audio - expected)) <= 1e-3


def test_batch_equals_single(backend: PiperBackend, sentence_ids: dict[str, list[int]]) -> None:
    sentences = [sentence_ids[name] for name in ("question", "short", "punctuation")]  # three different lengths
    assert len(bucket_by_length([len(s) for s in sentences], backend.batch_policy)) == 1
    batched = backend.synthesize_ids(sentences, DETERMINISTIC, None)
    for ids, audio in zip(sentences, batched, strict=True):
        (single,) = backend.synthesize_ids([ids], DETERMINISTIC, None)
        assert audio.shape == single.shape
        # Padding changes the convolutions' summation order; 5e-4 is -66 dB (seen: 1.1e-4 on 3 of 57,344 samples).
        np.testing.assert_allclose(audio, single, rtol=0, atol=5e-4)


def test_seeded_noise_is_reproducible_and_scales_apply(
    backend: PiperBackend, sentence_ids: dict[str, list[int]]
) -> None:
    ids = sentence_ids["question"]
    noisy = VitsControls()  # the voice's default scales
    short = sentence_ids["short"]
    first = backend.synthesize_ids([short], noisy, torch.Generator().manual_seed(7))[0]
    again = backend.synthesize_ids([short], noisy, torch.Generator().manual_seed(7))[0]
    other = backend.synthesize_ids([short], noisy, torch.Generator().manual_seed(8))[0]
    np.testing.assert_array_equal(first, again)
    assert first.shape != other.shape or not np.allclose(first, other)
    slow = backend.synthesize_ids([ids], VitsControls(noise_scale=0.0, length_scale=1.5, noise_w=0.0), None)[0]
    normal = backend.synthesize_ids([ids], DETERMINISTIC, None)[0]
    fast = backend.synthesize_ids([ids], VitsControls(noise_scale=0.0, length_scale=0.625, noise_w=0.0), None)[0]
    # The length scale is the duration ratio, although every phoneme's duration is still rounded up to a frame.
    assert len(slow) / len(normal) == pytest.approx(1.5, abs=0.02)
    assert len(fast) / len(normal) == pytest.approx(0.625, abs=0.02)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_cuda_matches_cpu(dtype: str, backend: PiperBackend, sentence_ids: dict[str, list[int]]) -> None:
    gpu = PiperBackend(batch_policy=backend.batch_policy)
    gpu.load("cuda", dtype)
    weight = weakref.ref(gpu._require_model().dec.conv_post.weight)
    sentences = [sentence_ids[name] for name in ("long", "short", "question")]
    try:
        on_gpu = gpu.synthesize_ids(sentences, DETERMINISTIC, None)
        seeded = gpu.synthesize_ids(sentences[:1], VitsControls(), torch.Generator(device="cuda").manual_seed(3))
    finally:
        gpu.unload()
    for ids, audio in zip(sentences, on_gpu, strict=True):
        (reference,) = backend.synthesize_ids([ids], DETERMINISTIC, None)
        assert audio.shape == reference.shape  # durations are computed in float32 in every dtype
        if dtype == "float32":
            assert np.max(np.abs(audio - reference)) <= 1e-3
        else:
            # Half precision in flow + decoder: 0.998 on CPU bfloat16, 0.988 measured on an H200 (cuDNN bf16).
            assert np.corrcoef(audio, reference)[0, 1] > 0.98
    assert seeded[0].size > 0 and np.all(np.isfinite(seeded[0]))
    gc.collect()
    assert weight() is None, "unload drops every reference to the device weights"


def test_buckets_keep_similar_lengths_together() -> None:
    policy = BatchPolicy(max_ratio=1.5, max_padded_ids=400)
    lengths = [100, 12, 95, 10, 70, 11, 40]
    batches = bucket_by_length(lengths, policy)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert longest <= 1.5 * min(lengths[i] for i in batch)
        assert longest * len(batch) <= policy.max_padded_ids
    assert [sorted(b) for b in batches] == [[0, 2, 4], [6], [1, 3, 5]]
    assert bucket_by_length([], policy) == []
