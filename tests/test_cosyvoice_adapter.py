"""The CosyVoice adapter's contract, against test doubles of upstream's classes (tests/fixture_cosyvoice_upstream.py).

Runs on CPU in CI with neither torchaudio nor upstream CosyVoice installed: modes are chosen correctly and
CosyVoice3's prefix is added, upstream's generator is closed (and its thread stopped, its dicts dropped) when a
caller leaves early, the speaker LRU stays bounded, an error in upstream's llm_job thread surfaces as our typed
error, the prompt limits speak one sentence each, and streamed chunks arrive in order with the hop length reset.
The GPU tests (tests/test_cosyvoice_gpu.py) drive the real upstream code.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
import threading
import types
from collections.abc import Generator
from pathlib import Path
from typing import cast

import numpy as np
import pytest
import torch

from tests.fixture_cosyvoice_upstream import SAMPLES_PER_TOKEN, FakeModel, decode, fake_runtime
from voicelab.backends.base import AudioChunk, SpeechRequest, run_plainly
from voicelab.backends.cosyvoice.backend import CosyVoiceBackend, CosyVoiceConfig
from voicelab.backends.cosyvoice.modes import Mode, plan_mode
from voicelab.backends.cosyvoice.preflight import code_problem, preflight
from voicelab.backends.cosyvoice.request_watch import LlmWatch, token_limit
from voicelab.backends.cosyvoice.upstream import UpstreamRuntime
from voicelab.errors import BackendRuntimeError, InvalidPromptError
from voicelab.settings import Settings
from voicelab.voice.prompt import PromptAudio

RATE = 16000


def prompt(seconds: float = 3.0, transcript: str = "", rate: int = RATE, seed: int = 0) -> PromptAudio:
    samples = np.random.default_rng(seed).normal(0, 0.1, int(seconds * rate)).astype(np.float32)
    return PromptAudio(samples, rate, hashlib.sha256(samples.tobytes()).hexdigest(), transcript)


def model_dir(tmp_path: Path, version: int = 2, token_cap: int | None = None) -> Path:
    (tmp_path / f"cosyvoice{version}.yaml").write_text("# test\n")
    if token_cap:
        (tmp_path / "voicelab-random.json").write_text(json.dumps({"token_cap": token_cap}))
    return tmp_path


def backend(tmp_path: Path, version: int = 2, cache: int = 8, token_cap: int | None = None) -> CosyVoiceBackend:
    runtime = fake_runtime(version)

    def loader(directory: Path, code: str, device: str, dtype: str, cap: int | None) -> UpstreamRuntime:
        return fake_runtime(version, cap) if cap else runtime

    result = CosyVoiceBackend(CosyVoiceConfig(model_dir(tmp_path, version, token_cap), "", cache), loader)
    result.load("cpu", "float32")
    return result


def model_of(b: CosyVoiceBackend) -> FakeModel:
    assert b.runtime is not None
    return b.runtime.model  # type: ignore[no-any-return]


def test_modes_are_chosen_from_transcript_and_instruction() -> None:
    assert plan_mode(2, "hello there", "").mode is Mode.ZERO_SHOT
    assert plan_mode(2, "", "").mode is Mode.CROSS_LINGUAL
    assert plan_mode(2, "hello there", "speak slowly").mode is Mode.INSTRUCT
    assert plan_mode(2, "", "用四川话说这句话").prompt_text == "用四川话说这句话<|endofprompt|>"


def test_cosyvoice3_gets_its_system_prefix_in_every_mode() -> None:
    prefix = "You are a helpful assistant.<|endofprompt|>"
    assert plan_mode(3, "hello there", "").prompt_text == prefix + "hello there"
    assert plan_mode(3, "", "").text_prefix == prefix
    assert (
        plan_mode(3, "", "请用广东话表达。").prompt_text
        == "You are a helpful assistant. 请用广东话表达。<|endofprompt|>"
    )
    typed = "You are a helpful assistant.<|endofprompt|>hi"
    assert plan_mode(3, typed, "").prompt_text == typed  # never twice


def test_upstream_inputs_follow_the_mode(tmp_path: Path) -> None:
    b = backend(tmp_path, version=3)
    for transcript, instruction in (("the prompt says this", ""), ("", ""), ("", "speak slowly")):
        list(b.synthesize(SpeechRequest("Hello world.", "en", prompt=prompt(transcript=transcript),
                                        instruction=instruction, options={"stream": 0})))  # fmt: skip
    zero, cross, instruct = model_of(b).calls
    assert decode(zero["prompt_text"]).endswith("<|endofprompt|>the prompt says this")
    assert "llm_prompt_speech_token" in zero and "llm_prompt_speech_token" not in instruct
    assert "prompt_text" not in cross and decode(cross["text"]).startswith("You are a helpful assistant.")
    assert decode(instruct["prompt_text"]) == "You are a helpful assistant. speak slowly<|endofprompt|>"
    assert decode(instruct["text"]) == "Hello world"


def test_chunks_stream_in_order_with_silence_only_between_sentences_and_the_hop_reset(tmp_path: Path) -> None:
    b = backend(tmp_path)
    text = "A sentence long enough for several streamed chunks of audio, really it is. Then a second one."
    chunks = list(b.synthesize(SpeechRequest(text, "en", prompt=prompt(), sentence_silence_s=0.1)))
    first = [c for c in chunks if c.text == "A sentence long enough for several streamed chunks of audio, really it is"]
    assert len(first) >= 3
    numbers = [round(float(c.audio[0]) * 100) for c in first]
    assert numbers == sorted(numbers) and numbers[0] == 0.0
    assert np.abs(chunks[len(first)].audio[: int(0.1 * 24000)]).max() == 0.0 and len(chunks) > len(first)
    assert all(c.sample_rate == 24000 for c in chunks)
    firsts = [call["tokens"] for call in model_of(b).wave_calls if call["offset"] == 0 and call["stream"]]
    assert firsts == [28, 28]  # 25 + 3 look-ahead for each sentence: upstream would start the second at 100


def test_speed_uses_upstream_whole_mode(tmp_path: Path) -> None:
    b = backend(tmp_path)
    (chunk,) = b.synthesize(SpeechRequest("Twelve chars", "en", prompt=prompt(), speed=2.0))
    assert [(c["stream"], c["finalize"], c["speed"]) for c in model_of(b).wave_calls] == [(False, True, 2.0)]
    assert len(chunk.audio) == 2 * len("Twelve chars") * SAMPLES_PER_TOKEN // 2


def _leave_after_the_first_chunk_and_check_it_stopped(b: CosyVoiceBackend) -> None:
    """A caller that leaves after the first chunk of a long text: the token loop stops, its dicts are dropped."""
    model = model_of(b)
    model.llm.token_delay_s = 0.002
    chunks = cast(
        Generator[AudioChunk, None, None], b.synthesize(SpeechRequest("x" * 200 + ".", "en", prompt=prompt()))
    )
    next(chunks)
    chunks.close()
    assert model.running_jobs == 0, "the llm thread is still running"
    assert model.llm.emitted < 400, "the llm thread ran to the end after the caller left"
    assert model.tts_speech_token_dict == {} and model.llm_end_dict == {} and model.hift_cache_dict == {}


def test_leaving_early_closes_upstream_stops_its_thread_and_drops_its_dicts(tmp_path: Path) -> None:
    _leave_after_the_first_chunk_and_check_it_stopped(backend(tmp_path))


def test_pooled_llm_threads_give_the_same_audio_reuse_their_threads_and_still_stop_early(tmp_path: Path) -> None:
    """``PooledThreads`` (the host-memory bench's A/B) runs each ``llm_job`` on a reused thread: streamed and whole
    requests give the samples the default new thread gives, no thread is started per request, and a caller that
    leaves early still stops its token loop and drops its dicts."""
    from voicelab.backends.cosyvoice.speech_loop import PooledThreads

    text = "A sentence long enough for several streamed chunks of audio, really it is."
    sides = {}
    for name in ("new", "pooled"):
        (tmp_path / name).mkdir()
        b = backend(tmp_path / name)
        assert b.runtime is not None
        if name == "pooled":
            b.runtime.llm_threads = PooledThreads(2)
        threads: list[threading.Thread] = []
        guarded = b.runtime.model.llm_job
        b.runtime.model.llm_job = lambda *args, job=guarded, seen=threads: (
            seen.append(threading.current_thread()), job(*args))[1]  # fmt: skip
        sides[name] = [
            np.concatenate([c.audio for c in b.synthesize(SpeechRequest(text, "en", prompt=prompt(), seed=3,
                                                                         options={"stream": stream}))])
            for stream in (1, 0, 1)
        ]  # fmt: skip
        assert len(threads) == 3 and len(set(threads)) == (1 if name == "pooled" else 3), name
    for ours, theirs in zip(sides["pooled"], sides["new"], strict=True):
        assert np.array_equal(ours, theirs)
    _leave_after_the_first_chunk_and_check_it_stopped(b)  # the pooled backend, last in the loop


def test_requests_run_side_by_side_each_as_it_would_alone_and_a_failure_fails_only_its_own(tmp_path: Path) -> None:
    """The engine's micro-batch (``synthesize_batch``): streams at once keep their own hop length, chunks and
    dicts; one request's error in upstream's thread reaches that request only."""
    b = backend(tmp_path)
    model = model_of(b)
    model.llm.token_delay_s = 0.001
    model.llm.fail_on = "broken"
    texts = ["x" * 90 + ".", "y" * 140 + ".", "this one is broken.", "z" * 60 + "."]
    requests = [SpeechRequest(t, "en", prompt=prompt(), seed=i) for i, t in enumerate(texts)]
    alone = [[len(c.audio) for c in b.synthesize(r)] for r in requests if "broken" not in r.text]
    model.most_jobs_at_once = 0
    chunks: dict[int, list[AudioChunk]] = {i: [] for i in range(len(texts))}
    errors: dict[int, Exception] = {}
    for event in b.synthesize_batch(requests, run_plainly):
        if event.chunk is not None:
            chunks[event.index].append(event.chunk)
        if event.error is not None:
            errors[event.index] = event.error
    assert model.most_jobs_at_once >= 3, "the requests did not overlap"
    assert list(errors) == [2] and isinstance(errors[2], BackendRuntimeError) and "broken" in str(errors[2])
    assert [[len(c.audio) for c in chunks[i]] for i in (0, 1, 3)] == alone
    for i in (0, 1, 3):
        assert [round(float(c.audio[0]) * 100) for c in chunks[i]] == list(range(len(chunks[i])))
    assert model.tts_speech_token_dict == {} and model.llm_end_dict == {} and model.hift_cache_dict == {}
    assert b.capabilities.batching is False  # one decode slot: the engine sends this backend one job at a time


def test_the_audio_loop_wakes_on_each_token_not_on_a_poll() -> None:
    """Upstream's ``tts`` looks for tokens every 100 ms; ours is woken by the token thread (``progressed``)."""
    watch, tokens, woke = LlmWatch("request"), [], threading.Event()

    def wait() -> None:
        watch.wait_until(lambda: len(tokens) >= 3, poll_s=60.0)
        woke.set()

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    for token in range(3):
        tokens.append(token)
        watch.progressed()
    assert woke.wait(timeout=10), "the loop waited for its poll instead of waking on the token"


def test_speaker_entries_stay_in_a_bounded_lru(tmp_path: Path) -> None:
    b = backend(tmp_path, cache=2)
    for seed in (0, 1, 2, 0, 2):
        list(b.synthesize(SpeechRequest("Hi.", "en", prompt=prompt(seed=seed), options={"stream": 0})))
    assert b.runtime is not None and b.runtime.featurizer.calls == 4  # 0, 1, 2, then 0 again (evicted by 2)
    assert len(b.speakers) == 2 and b.speakers.hits == 1
    b.unload()
    assert len(b.speakers) == 0


@pytest.mark.parametrize("stream", [0, 1])
def test_an_error_in_upstreams_llm_thread_is_raised_as_our_typed_error(tmp_path: Path, stream: int) -> None:
    b = backend(tmp_path)
    model_of(b).llm.fail_after = 30
    with pytest.raises(BackendRuntimeError, match="speech-token generator failed: RuntimeError: mat1 and mat2"):
        list(b.synthesize(SpeechRequest("x" * 60 + ".", "en", prompt=prompt(), options={"stream": stream})))
    model_of(b).llm.fail_after = None
    assert len(list(b.synthesize(SpeechRequest("Fine again.", "en", prompt=prompt())))) >= 1


def test_prompt_limits_are_one_sentence_each(tmp_path: Path) -> None:
    b = backend(tmp_path)
    with pytest.raises(InvalidPromptError) as low:
        list(b.synthesize(SpeechRequest("Hi.", "en", prompt=prompt(rate=8000))))
    assert str(low.value) == "CosyVoice needs a voice prompt sampled at 16 kHz or more; this one is 8000 Hz."
    with pytest.raises(InvalidPromptError) as long:
        list(b.synthesize(SpeechRequest("Hi.", "en", prompt=prompt(seconds=31))))
    assert str(long.value) == "CosyVoice accepts voice prompts up to 30 s; this one is 31.0 s, please trim it."


def test_a_request_without_a_prompt_uses_the_neutral_built_in_voice_cross_lingually(tmp_path: Path) -> None:
    b = backend(tmp_path)
    chunks = list(b.synthesize(SpeechRequest("Warming up.", "en", options={"stream": 0})))
    assert len(chunks) == 1 and len(chunks[0].audio) > 0
    assert "prompt_text" not in model_of(b).calls[0] and len(b.speakers) == 1


def test_random_weights_emit_a_length_capped_by_the_text_with_stop_ids_masked(tmp_path: Path) -> None:
    assert [token_limit(n, 500) for n in (1, 10, 1000)] == [20, 40, 500]
    b = backend(tmp_path, token_cap=500)
    model_of(b).llm.stop_first = True  # unmasked, this would stop at once
    (chunk,) = b.synthesize(SpeechRequest("x" * 30, "en", prompt=prompt(), options={"stream": 0}))
    assert len(chunk.audio) == 120 * SAMPLES_PER_TOKEN


def test_preflight_says_what_is_missing_in_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "--cosyvoice-dir DIR" in (preflight(Settings(backend="cosyvoice")) or "")
    assert "is not a CosyVoice2/3 model directory" in (preflight(Settings(cosyvoice_dir=str(tmp_path))) or "")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "torchaudio" else real_find_spec(n, *a))
    message = preflight(Settings(cosyvoice_dir=str(model_dir(tmp_path))))
    assert message is not None and "requirements-cosyvoice.txt" in message and "torchaudio" in message
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "cosyvoice" else real_find_spec(n, *a))
    assert "--cosyvoice-code DIR" in (code_problem("") or "")
    assert "is not a CosyVoice checkout" in (code_problem(str(tmp_path)) or "")


def test_the_app_refuses_to_start_without_the_optional_install(capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess
    import sys

    check = "import voicelab.backends.cosyvoice.preflight, sys; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], capture_output=True, text=True).stdout.strip() == "False"
    import app

    with pytest.raises(SystemExit) as stopped:
        app.main(["--backend", "cosyvoice"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.strip().startswith("CosyVoice needs a model directory")


def test_the_vocoders_stft_window_is_moved_to_its_device_once() -> None:
    """Upstream's HiFT keeps its window on the CPU and copies it in every STFT (a host sync per call on CUDA):
    it is moved once, with the same values; a vocoder without one, or already there, is left alone."""
    import types

    from voicelab.backends.cosyvoice.upstream import windows_on_device

    window = torch.hann_window(16)
    vocoder = types.SimpleNamespace(stft_window=window)
    windows_on_device(vocoder, "meta")
    assert vocoder.stft_window.device.type == "meta" and vocoder.stft_window.shape == window.shape
    on_cpu = types.SimpleNamespace(stft_window=window)
    windows_on_device(on_cpu, torch.device("cpu"))
    assert on_cpu.stft_window is window
    windows_on_device(types.SimpleNamespace(), "meta")  # no window: nothing to do


def test_decode_stream_option_is_on_or_off_in_one_sentence() -> None:
    """``decode_stream`` (the batcher's steps on their own CUDA stream) is off by default: on the H200 it held
    ~100 MiB more reserved memory for no first-audio gain; anything but on/off is refused before anything loads."""
    from voicelab.backends.cosyvoice.backend import create
    from voicelab.backends.cosyvoice.decode_setup import DecodeChoice
    from voicelab.errors import BackendLoadError
    from voicelab.settings import HELP, Settings

    with pytest.raises(
        BackendLoadError, match=r"^CosyVoice backend option: decode_stream must be on or off, not 'x'\.$"
    ):
        create(Settings(backend="cosyvoice", backend_options="decode_slots=4,decode_stream=x"))
    assert not DecodeChoice().own_stream and "decode_stream=on|off" in HELP["backend_options"]


def test_decode_kernels_option_is_auto_torch_or_triton_and_triton_needs_cuda_in_one_sentence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``decode_kernels`` (the step's layers as PyTorch's kernels, as Triton's, or per shape the faster) is auto by
    default; anything else is refused before anything loads, and triton is refused off CUDA and without the
    package, each in a sentence. auto asks for the choice only on CUDA with Triton installed: PyTorch's kernels
    elsewhere, never an error."""
    from voicelab.backends.cosyvoice.backend import create
    from voicelab.backends.cosyvoice.decode_setup import DecodeChoice, _check_triton, resolve_kernels
    from voicelab.errors import BackendLoadError
    from voicelab.settings import HELP, Settings

    sentence = "CosyVoice backend option: decode_kernels must be one of auto, torch, triton, not 'fast'."
    with pytest.raises(BackendLoadError, match=f"^{re.escape(sentence)}$"):
        create(Settings(backend="cosyvoice", backend_options="decode_kernels=fast"))
    assert DecodeChoice().kernels == "auto" and "decode_kernels=auto|torch|triton" in HELP["backend_options"]
    assert DecodeChoice.parse("auto", "4", "triton").kernels == "triton"
    assert DecodeChoice.parse("auto", "4", "auto").kernels == "auto"
    assert resolve_kernels("auto", "cpu") == resolve_kernels("torch", "cpu") == "torch"
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(BackendLoadError, match=r"^decode_kernels=triton runs on a CUDA device, not cpu: leave it"):
        _check_triton("cpu")
    monkeypatch.setitem(sys.modules, "triton", None)  # not installed: its import fails
    with pytest.raises(BackendLoadError, match=r"^decode_kernels=triton needs the triton package"):
        _check_triton("cuda")
    assert resolve_kernels("auto", "cuda") == "torch"
    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    assert resolve_kernels("auto", "cuda:0") == "auto"


def test_wave_slots_is_a_whole_number_in_one_sentence() -> None:
    """``wave_slots`` (token-to-wave calls in flight at once, first chunks first) is 2 by default: on the H200 it
    halved the first byte at 8 API clients against unbounded calls."""
    from voicelab.backends.cosyvoice.backend import DEFAULT_WAVE_SLOTS, create
    from voicelab.errors import BackendLoadError
    from voicelab.settings import HELP, Settings

    for value in ("x", "-1", "1.5"):
        sentence = f"CosyVoice backend option: wave_slots must be a whole number (0 or more), not '{value}'."
        with pytest.raises(BackendLoadError, match=f"^{re.escape(sentence)}$"):
            create(Settings(backend="cosyvoice", backend_options=f"wave_slots={value}"))
    assert DEFAULT_WAVE_SLOTS == 2 and "wave_slots=N" in HELP["backend_options"]


def test_the_panel_gets_the_llm_step_graphs_beside_the_flow_buckets(tmp_path: Path) -> None:
    """The graph pools' memory on the panel, the decode path's as well as the flow's; none on the CPU."""
    from types import SimpleNamespace

    from voicelab.backends.base import GraphBucket

    b = backend(tmp_path)
    assert b.graph_buckets() == ()  # upstream's loop on the CPU, no flow graphs
    step = GraphBucket("llm step", 1, 256, 80 << 20, 20.0, 2.5, kept=True)
    flow = GraphBucket("flow estimator", 2, 256, 40 << 20, 31.0, 7.0, kept=True)
    assert b.runtime is not None
    b.runtime.decoder = SimpleNamespace(runner=SimpleNamespace(reports=[step]))
    b.runtime.flow_graphs = SimpleNamespace(reports=[flow])  # type: ignore[assignment]
    assert b.graph_buckets() == (step, flow)
