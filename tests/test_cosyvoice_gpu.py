"""CosyVoice through the real upstream code, the worker engine and the panel's controls, on an NVIDIA GPU.

The model is a random-weight directory of the real architecture: ``VOICELAB_COSYVOICE_RANDOM_DIR`` (and
``VOICELAB_COSYVOICE3_RANDOM_DIR``) when set (the GPU proof uses full-size ones made by
``python -m voicelab.backends.cosyvoice.random_model``), otherwise a tiny one written here. CosyVoice3 also needs
``VOICELAB_COSYVOICE_CODE`` (an upstream checkout). With ``VOICELAB_COSYVOICE_DIR`` pointing at real weights, the
last test checks a real clone. Skipped without CUDA or without the optional install (requirements-cosyvoice.txt).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.fixture_cosyvoice_llm import code_dir
from tests.gpu_needs import SCORED
from voicelab.engine.client import EngineClient
from voicelab.engine.messages import ChunkReady
from voicelab.history import History
from voicelab.settings import Settings
from voicelab.studio import GenerationRequest, GenerationService, PromptClip, Take

pytestmark = pytest.mark.gpu
DATA = Path(__file__).parent / "data"
PROMPT = DATA / "arctic_slt_en_female.wav"
TRANSCRIPT = (DATA / "arctic_slt_en_female.txt").read_text().strip()
TEXT = "The old lighthouse keeper climbed the spiral stairs every evening at dusk."
SECONDS_PER_TOKEN = 1 / 25


def upstream_code() -> str:
    """Upstream's checkout (``VOICELAB_COSYVOICE_CODE``, else ``.cosy/upstream``), "" where there is none."""
    found = code_dir()
    return str(found) if found else ""


def _skip_without_gpu_or_install() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA")
    for module in ("torchaudio", "hyperpyyaml", "whisper", "matcha"):
        pytest.importorskip(module, reason=f"the optional CosyVoice install is missing ({module})")
    if code_dir() is None:  # the LLM half of both versions is only in upstream's code
        pytest.skip("needs an upstream CosyVoice checkout (VOICELAB_COSYVOICE_CODE or .cosy/upstream)")


def _random_dir(version: int, tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("VOICELAB_COSYVOICE_RANDOM_DIR" if version == 2 else "VOICELAB_COSYVOICE3_RANDOM_DIR")
    if given:
        return Path(given)
    from voicelab.backends.cosyvoice.random_model import write_model

    code = upstream_code()
    if code and str(Path(code).resolve()) not in sys.path:  # CosyVoice3's classes exist only in upstream's checkout
        sys.path.insert(0, str(Path(code).resolve()))  # (seen on the H200: cosyvoice-minicpmo has no CosyVoice3LM)
    return write_model(tmp_path_factory.mktemp(f"cosyvoice{version}"), version, tiny=True, device="cuda")


def _service(
    model_dir: Path, tmp: Path, dtype: str = "float32", options: str = ""
) -> Iterator[tuple[EngineClient, GenerationService]]:
    settings = Settings(
        backend_options=options,
        backend="cosyvoice",
        cosyvoice_dir=str(model_dir),
        cosyvoice_code=upstream_code(),
        device="cuda",
        dtype=dtype,
        job_timeout_s=600.0,
    )
    with EngineClient(settings) as engine:
        engine.wait_ready(timeout=600)
        yield engine, GenerationService(engine, History(tmp), settings)


@pytest.fixture(scope="module", params=[2, 3], ids=["cosyvoice2", "cosyvoice3"])
def engine_service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[EngineClient, GenerationService]]:
    _skip_without_gpu_or_install()
    model_dir = _random_dir(request.param, tmp_path_factory)
    yield from _service(model_dir, tmp_path_factory.mktemp("history"))


def _plausible(seconds: float, text: str) -> None:
    assert 20 * SECONDS_PER_TOKEN * 0.9 <= seconds <= 500 * SECONDS_PER_TOKEN * len(text.split(".")) + 1


@pytest.mark.parametrize(
    ("transcript", "instruction"),
    [(TRANSCRIPT, ""), ("", ""), ("", "speak slowly in a warm low voice")],
    ids=["zero-shot", "cross-lingual", "instruct"],
)
def test_each_mode_produces_audio_of_plausible_length(
    engine_service: tuple[EngineClient, GenerationService], transcript: str, instruction: str
) -> None:
    _, service = engine_service
    request = GenerationRequest(
        TEXT, kind="clone", prompt=PromptClip(PROMPT, transcript), instruction=instruction, options={"stream": 0}
    )
    result = service.generate(request).first.result
    _plausible(result.duration_s, TEXT)
    assert result.sample_rate == 24000 and result.similarity_base is None
    assert (result.similarity is not None) == SCORED  # without the speaker encoders the take is spoken unscored


def test_streaming_yields_chunks_before_the_end(engine_service: tuple[EngineClient, GenerationService]) -> None:
    _, service = engine_service
    long_text = TEXT + " " + TEXT.replace("old", "young")
    events = list(
        service.stream(service.prepare(GenerationRequest(long_text, kind="clone", prompt=PromptClip(PROMPT))))
    )
    chunks = [e for e in events if isinstance(e, ChunkReady)]
    take = events[-1]
    assert isinstance(take, Take) and len(chunks) >= 2
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert take.result.first_audio_s < take.result.latency_s
    _plausible(take.result.duration_s, long_text)


def test_clean_cache_and_soft_restart_work_on_it(engine_service: tuple[EngineClient, GenerationService]) -> None:
    engine, service = engine_service
    report = engine.clean_cache(clear_profiles=True)
    assert report.after.reserved <= report.before.reserved
    restart = engine.soft_restart()
    assert restart.new_pid != restart.old_pid
    result = service.generate(GenerationRequest("Still here after a restart.", kind="clone", prompt=PromptClip(PROMPT)))
    assert result.first.result.duration_s > 0.5


def test_jobs_queued_together_run_side_by_side_each_as_long_as_alone(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """decode_slots=4: the engine sends queued jobs as one micro-batch; each job's LLM decodes in the shared batch
    from its own seed, so its length equals the length it has alone (same seed), whoever runs beside it."""
    _skip_without_gpu_or_install()
    texts = [TEXT, "Short one.", "The committee will meet again on Thursday.", "Why does the river sound louder?"]
    tmp = tmp_path_factory.mktemp("history-slots")
    services = _service(_random_dir(2, tmp_path_factory), tmp, options="decode_slots=4")
    engine, service = next(services)

    def take(text: str) -> tuple[float, int]:
        request = GenerationRequest(
            text, kind="clone", prompt=PromptClip(PROMPT, TRANSCRIPT), seed=11, options={"stream": 0}
        )
        result = service.generate(request).first.result
        return result.duration_s, result.batch_size

    try:
        alone = [take(text)[0] for text in texts]
        with ThreadPoolExecutor(len(texts)) as pool:
            together = list(pool.map(take, texts))
        assert engine.allocator_stats().allocated > 0
    finally:
        services.close()
    assert [seconds for seconds, _ in together] == alone
    assert max(size for _, size in together) >= 2, "the jobs never ran as one micro-batch"


def test_real_weights_clone_when_a_model_directory_is_given(tmp_path: Path) -> None:
    real = os.environ.get("VOICELAB_COSYVOICE_DIR")
    if not real:
        pytest.skip("set VOICELAB_COSYVOICE_DIR to a CosyVoice2/3 model directory with real weights")
    _skip_without_gpu_or_install()
    for _, service in _service(Path(real), tmp_path):
        request = GenerationRequest(TEXT, kind="clone", prompt=PromptClip(PROMPT, TRANSCRIPT), options={"stream": 0})
        result = service.generate(request).first.result
        assert 2.0 < result.duration_s < 15.0
        assert result.similarity > 0.5 if SCORED else result.similarity is None


def test_flow_estimator_graphs_equal_eager_and_are_kept_only_where_faster(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The flow's estimator behind bucketed CUDA graphs, every bucket captured at load, whole and streamed (chunk
    masks): same frames as eager at lengths inside buckets, a report per bucket and mode (kept only where faster);
    the device's random draws still work after the captures; Clean cache's release drops them and ``capture_all``
    restores. Padded to its bucket a call
    runs other convolution algorithms, in TF32 (cuDNN's default): on the H200 the frames differed from eager by
    1.4e-3 of their scale, so 5e-3 here; a padding that leaked into the frames would differ by far more. The graphs'
    matmuls run in TF32 (``flow_tf32``, on by default): against the eager call in full float32 they stay within
    the same bound (1.5e-3 unpadded on the H200)."""
    _skip_without_gpu_or_install()
    import torch

    from voicelab.backends.cosyvoice.flow_graphs import FRAME_BUCKETS, matmul_tf32
    from voicelab.backends.cosyvoice.upstream import load_runtime

    runtime = load_runtime(_random_dir(2, tmp_path_factory), upstream_code(), "cuda", "float32", 500)
    graphed = runtime.flow_graphs
    assert graphed is not None
    print([(r.stage, r.length, round(r.eager_ms, 2), round(r.graph_ms, 2), r.kept, r.bytes >> 20)
           for r in graphed.reports])  # fmt: skip
    assert sorted(r.length for r in graphed.reports) == sorted(FRAME_BUCKETS * 2)
    assert any(r.kept and r.stage.endswith("streamed") for r in graphed.reports), "no streamed bucket kept"
    kept = sum(r.kept for r in graphed.reports)
    assert kept >= 1, "no bucket's replay beat eager"
    torch.rand(4, device="cuda")  # the default generator left in capture mode would raise here
    generator = torch.Generator(device="cuda").manual_seed(0)
    with torch.inference_mode():
        # 1,152 frames: a 13 s prompt and 10 s of speech, padded into the 1,536 bucket (past 1,024 it ran eagerly)
        lengths = ((137, False), (300, False), (611, False), (1152, False), (180, True), (433, True), (1100, True))
        for frames, streaming in lengths:
            x, mu, cond = (torch.randn(2, 80, frames, device="cuda", generator=generator) for _ in range(3))
            mask, t = torch.ones(2, 1, frames, device="cuda"), torch.rand(2, device="cuda", generator=generator)
            spks = torch.randn(2, 80, device="cuda", generator=generator)
            with matmul_tf32(graphed.tf32):  # the graphs' precision: the check is of capture and padding
                eager = graphed.estimator(x, mask, mu, t, spks, cond, streaming=streaming)
            out = graphed(x, mask, mu, t, spks, cond, streaming=streaming)
            full = graphed.estimator(x, mask, mu, t, spks, cond, streaming=streaming)  # float32 throughout
            assert float((out - full).abs().max()) <= 5e-3 * float(full.abs().max()), (frames, streaming, "TF32")
            assert out.shape == eager.shape
            assert float((out - eager).abs().max()) <= 5e-3 * float(eager.abs().max()), (frames, streaming)
            if streaming:  # the chunk masks matter: the same call whole gives other frames
                whole = graphed.estimator(x, mask, mu, t, spks, cond, streaming=False)
                assert float((whole - eager).abs().max()) > 5e-2 * float(eager.abs().max())
    assert graphed.release() == kept and graphed.captured == {} and graphed.released
    again = graphed.capture_all()
    assert abs(again - kept) <= 1  # a bucket whose graph barely beat eager may flip on a second timing
    assert not graphed.released
    runtime.close()


def test_our_speech_loop_gives_upstreams_tts_audio(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """``speech_loop.speak`` against upstream's own ``CosyVoice2Model.tts`` on one loaded model, same inputs and
    seed, whole and streamed: the same chunks and samples (the batched decoder samples from a per-request
    generator, so the LLM's thread and the vocoder's noise do not race for the default one). The first audio of
    each side is printed, not asserted: timings belong to the benchmark (on a loaded H200 ours came 0.12 s later
    once, with the same samples)."""
    _skip_without_gpu_or_install()
    import numpy as np
    import soundfile as sf

    from voicelab.backends.cosyvoice.decode_setup import DecodeChoice
    from voicelab.backends.cosyvoice.modes import plan_mode
    from voicelab.backends.cosyvoice.upstream import load_runtime

    code = upstream_code()
    runtime = load_runtime(
        _random_dir(2, tmp_path_factory), code, "cuda", "float32", 500, DecodeChoice("on", 2), flow_graphs=False
    )
    samples, rate = sf.read(PROMPT, dtype="float32")
    assert rate == 16000
    inputs = runtime.inputs(plan_mode(2, TRANSCRIPT, ""), TEXT, runtime.speaker(samples))
    for stream in (False, True):
        sides = {side: _timed_chunks(runtime, inputs, stream, side) for side in ("upstream", "ours") * 2}  # warm
        (theirs, their_first), (ours, our_first) = sides["upstream"], sides["ours"]
        print(f"stream={stream}: first audio upstream {their_first:.3f} s, ours {our_first:.3f} s")
        assert [len(c) for c in ours] == [len(c) for c in theirs] and (len(ours) > 1) == stream
        a, b = np.concatenate(theirs), np.concatenate(ours)
        assert float(np.abs(a - b).max()) <= 1e-3 * max(float(np.abs(a).max()), 1e-6)
    runtime.close()


def _timed_chunks(runtime: Any, inputs: dict[str, Any], stream: bool, side: str) -> tuple[list[Any], float]:
    """One request's chunks through upstream's ``tts`` or ours, seeded alike, and the time to the first."""
    import time

    import torch

    torch.manual_seed(11)
    runtime.model.token_hop_len = runtime.hops.first  # upstream's tts grows it across requests (its PR #1849)
    start, first, chunks = time.perf_counter(), 0.0, []
    if side == "upstream":
        outputs = (o["tts_speech"].reshape(-1).numpy() for o in runtime.model.tts(**inputs, stream=stream, speed=1.0))
    else:
        outputs = runtime.run(inputs, stream, 1.0)
    for chunk in outputs:
        first = first or time.perf_counter() - start
        chunks.append(chunk)
    return chunks, first
