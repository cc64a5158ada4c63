"""The CosyVoice backend inside the worker engine and the service, on CPU, over test doubles of upstream.

The same path the GPU tests take with the real upstream code (tests/test_cosyvoice_gpu.py), here with
``tests.fixture_cosyvoice_upstream:create`` plugged in by path: the worker loads and warms the backend up (with
no prompt: the built-in neutral voice), clones natively (scored, not matched), streams chunks in order, and
survives Clean cache and Soft restart. No torchaudio and no upstream install are needed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fixture_cosyvoice_upstream import SAMPLES_PER_TOKEN
from voicelab.engine.client import EngineClient
from voicelab.engine.messages import ChunkReady
from voicelab.errors import JobTimeoutError
from voicelab.history import History
from voicelab.settings import Settings
from voicelab.studio import GenerationRequest, GenerationService, PromptClip, Take

PROMPT = Path(__file__).parent / "data" / "arctic_slt_en_female.wav"


def fake_settings(tmp_path_factory: pytest.TempPathFactory, options: str = "", timeout_s: float = 60) -> Settings:
    """Settings for the worker over the test doubles, with a model directory of its own."""
    model_dir = tmp_path_factory.mktemp("cosyvoice2")
    (model_dir / "cosyvoice2.yaml").write_text("# a test double stands in for upstream\n")
    return Settings(
        backend="tests.fixture_cosyvoice_upstream:create",
        cosyvoice_dir=str(model_dir),
        backend_options=options,
        device="cpu",
        job_timeout_s=timeout_s,
    )


@pytest.fixture(scope="module")
def engine_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EngineClient, GenerationService]]:
    settings = fake_settings(tmp_path_factory)
    with EngineClient(settings) as engine:
        engine.wait_ready(timeout=120)
        yield engine, GenerationService(engine, History(tmp_path_factory.mktemp("history")), settings)


def test_a_clone_is_native_scored_and_as_long_as_the_tokens(
    engine_service: tuple[EngineClient, GenerationService],
) -> None:
    _, service = engine_service
    request = GenerationRequest(
        "Say this", kind="clone", prompt=PromptClip(PROMPT, "a transcript"), options={"stream": 0}
    )
    result = service.generate(request).first.result
    assert result.backend == "cosyvoice" and result.sample_rate == 24000
    assert len(result.audio) == 2 * len("Say this") * SAMPLES_PER_TOKEN
    assert result.similarity is not None and result.similarity_base is None


def test_streamed_chunks_arrive_in_order(engine_service: tuple[EngineClient, GenerationService]) -> None:
    _, service = engine_service
    request = GenerationRequest("y" * 120 + ".", kind="clone", prompt=PromptClip(PROMPT), instruction="speak slowly")
    events = list(service.stream(service.prepare(request)))
    chunks = [e for e in events if isinstance(e, ChunkReady)]
    assert isinstance(events[-1], Take) and len(chunks) >= 3
    assert [round(float(c.chunk.audio[0]) * 100) for c in chunks] == list(range(len(chunks)))


def test_clean_cache_and_soft_restart_keep_it_working(engine_service: tuple[EngineClient, GenerationService]) -> None:
    engine, service = engine_service
    engine.clean_cache(clear_profiles=True)
    report = engine.soft_restart()
    assert report.new_pid != report.old_pid
    result = service.generate(GenerationRequest("Again", kind="clone", prompt=PromptClip(PROMPT))).first.result
    assert len(result.audio) > 0


def test_with_several_decode_slots_a_short_job_joins_a_long_one_and_finishes_first(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """decode_slots=4: jobs that arrive while a long one runs start beside it at once (no wait for the device),
    so short requests come back before the long one ends; each answer has its own text's length and score."""
    settings = fake_settings(tmp_path_factory, "decode_slots=4,token_delay_ms=3")
    with EngineClient(settings) as engine:
        engine.wait_ready(timeout=120)
        service = GenerationService(engine, History(tmp_path_factory.mktemp("history-slots")), settings)
        texts = ["w" * 400, "Short one", "A little longer one", "The longest of the three here"]
        finished: dict[str, float] = {}

        def generate(text: str) -> tuple[int, float | None]:
            request = GenerationRequest(text, kind="clone", prompt=PromptClip(PROMPT), options={"stream": 0})
            result = service.generate(request).first.result
            finished[text] = time.monotonic()
            return len(result.audio), result.similarity

        with ThreadPoolExecutor(len(texts)) as pool:
            first = pool.submit(generate, texts[0])  # 800 tokens at 3 ms: about 2.4 s
            time.sleep(0.5)
            rest = [pool.submit(generate, t) for t in texts[1:]]
            clean = pool.submit(engine.clean_cache, False)  # waits for the running jobs, then runs
            more = pool.submit(generate, "After the clean")
            results = [first.result(), *(f.result() for f in rest)]
            assert clean.result(timeout=60).after is not None and more.result()[0] > 0
    assert [n for n, _ in results] == [2 * len(t) * SAMPLES_PER_TOKEN for t in texts]
    assert all(finished[t] < finished[texts[0]] for t in texts[1:]), "the short jobs waited for the long one"
    assert all(similarity is not None for _, similarity in results)


def test_a_timeout_fails_only_the_overdue_job_and_the_one_beside_it_runs_again(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """decode_slots=4, a 10 s job limit: a 16 s job times out and the worker is replaced; a 4 s job that started
    beside it 8 s later (so it is still running at 10 s, whatever the machine's speed) is not at fault, so it runs
    again on the new worker and comes back whole. There it pays a new worker's first prompt (both speaker encoders
    load: ~2 s, over 4 s on a 2-core CPU busy with another suite) inside its own limit: 6 s of margin. (A 5.6 s job
    started 5 s in left 4.4 s, and timed out again under a load of 3.7.)"""
    settings = fake_settings(tmp_path_factory, "decode_slots=4,token_delay_ms=20", timeout_s=10)
    with EngineClient(settings) as engine:
        engine.wait_ready(timeout=120)
        service = GenerationService(engine, None, settings)

        def generate(text: str) -> int:
            request = GenerationRequest(text, kind="clone", prompt=PromptClip(PROMPT), options={"stream": 0})
            return len(service.generate(request).first.result.audio)

        with ThreadPoolExecutor(2) as pool:
            long = pool.submit(generate, "w" * 400)  # 800 tokens at 20 ms
            time.sleep(8.0)
            beside = pool.submit(generate, "m" * 100)  # 200 tokens: 4 s
            with pytest.raises(JobTimeoutError, match="took longer than 10 s"):
                long.result(timeout=60)
            assert beside.result(timeout=60) == 2 * 100 * SAMPLES_PER_TOKEN
