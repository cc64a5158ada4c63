"""``CosyVoiceBackend``: VoiceLab's backend contract over upstream CosyVoice2/3 (see ``upstream.py``).

Native cloning and instructions: the engine hands it the prompt (16 kHz mono, with transcript) and the
instruction untouched and only scores similarity. Each normalised sentence is one upstream call; with the
``stream`` option on (speed 1), upstream's token-chunked generator yields several chunks per sentence.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from voicelab.backends.base import (
    AudioChunk,
    BatchEvent,
    Capabilities,
    GraphBucket,
    MemoryGuard,
    OptionSpec,
    SpeechRequest,
    run_plainly,
)
from voicelab.backends.cosyvoice.decode_setup import DecodeChoice
from voicelab.backends.cosyvoice.default_voice import default_prompt
from voicelab.backends.cosyvoice.features import PROMPT_RATE, SpeakerEntry
from voicelab.backends.cosyvoice.modes import ModePlan, plan_mode, segment_text
from voicelab.backends.cosyvoice.preflight import model_dir_of, preflight
from voicelab.backends.cosyvoice.upstream import UpstreamRuntime, load_runtime, model_version
from voicelab.backends.threaded import ReusedThreads, concurrent_events
from voicelab.errors import BackendLoadError, InvalidPromptError, InvalidTextError
from voicelab.lru import BoundedLRU
from voicelab.settings import Settings

log = logging.getLogger(__name__)

SAMPLE_RATE = 24000  # CosyVoice2 and CosyVoice3 both decode at 24 kHz
MAX_PROMPT_S = 30.0  # upstream's speech tokenizer refuses longer audio
RANDOM_MARKER = "voicelab-random.json"  # written by random_model.py: {"token_cap": N}
DEFAULT_WAVE_SLOTS = 2  # token-to-wave calls in flight at once (first_audio.py; 0: unbounded): H200, 8 clients
LANGUAGES = {2: ("en", "zh", "ja", "ko"), 3: ("en", "zh", "ja", "ko", "de", "es", "fr", "it", "ru")}
STREAM = OptionSpec("stream", "Stream upstream's chunks", 0.0, 1.0, 1.0, "1: audio every ~1 s of tokens; 0: a sentence")
Loader = Callable[[Path, str, str, str, int | None], UpstreamRuntime]


@dataclass(frozen=True)
class Pass:
    """How one segment is made: streamed in upstream's chunks or whole, at which speed, from which seed."""

    stream: bool
    speed: float
    seed: int
    opens: bool = False  # the request's first segment: its first audio goes ahead of others' later chunks


@dataclass(frozen=True)
class CosyVoiceConfig:
    """model_dir: a CosyVoice2/3 model directory. code_dir: an upstream checkout ("" = the installed package).
    speaker_cache: how many prompts' features stay on the device (least recently used goes first).
    decode_slots: requests the LLM decodes in one batch; above 1 the engine may run that many jobs at once.
    """

    model_dir: Path
    code_dir: str = ""
    speaker_cache: int = 8
    decode_slots: int = 1

    @property
    def token_cap(self) -> int | None:
        """Set for random-weight directories only: how many speech tokens the LLM may emit at most."""
        marker = self.model_dir / RANDOM_MARKER
        return int(json.loads(marker.read_text())["token_cap"]) if marker.is_file() else None


def check_prompt_limits(duration_s: float, sample_rate: int) -> None:
    """Upstream's two hard limits on a prompt, each as one sentence."""
    if sample_rate < PROMPT_RATE:
        raise InvalidPromptError(
            f"CosyVoice needs a voice prompt sampled at 16 kHz or more; this one is {sample_rate} Hz."
        )
    if duration_s > MAX_PROMPT_S:
        raise InvalidPromptError(
            f"CosyVoice accepts voice prompts up to 30 s; this one is {duration_s:.1f} s, please trim it."
        )


class CosyVoiceBackend:
    name = "cosyvoice"

    def __init__(self, config: CosyVoiceConfig, loader: Loader = load_runtime) -> None:
        self.config = config
        self.version = model_version(config.model_dir)
        self.loader = loader
        self.runtime: UpstreamRuntime | None = None
        self.speakers: BoundedLRU[SpeakerEntry] = BoundedLRU(config.speaker_cache)
        self._speaker_lock = threading.Lock()
        self.default_prompt = default_prompt()
        self.request_threads = ReusedThreads("voicelab-request")  # see its docstring

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            languages=LANGUAGES[self.version],
            sample_rate=SAMPLE_RATE,
            native_cloning=True,
            native_instructions=True,
            streaming=True,
            dtypes=("float32", "bfloat16", "float16"),
            options=(STREAM,),
            batching=self.config.decode_slots > 1,  # synthesize_batch: requests side by side, decode shared
            concurrent_jobs=self.config.decode_slots,  # and a job joins while others run
        )

    def load(self, device: str, dtype: str) -> None:
        self.runtime = self.loader(self.config.model_dir, self.config.code_dir, device, dtype, self.config.token_cap)

    def unload(self) -> None:
        self.speakers.clear()
        if self.runtime is not None:
            self.runtime.close()
        self.runtime = None

    def synthesize(self, request: SpeechRequest, guard: MemoryGuard = run_plainly) -> Iterator[AudioChunk]:
        runtime = self._loaded()
        prompt = request.prompt or self.default_prompt  # no prompt: the neutral built-in voice (default_voice.py)
        check_prompt_limits(prompt.duration_s, prompt.sample_rate)
        plan = plan_mode(self.version, runtime.normalize_prompt(prompt.transcript), request.instruction)
        segments = runtime.normalize(request.text)
        if not segments:
            raise InvalidTextError("Please type some text to speak.")
        entry = self._speaker(runtime, prompt.sha256, prompt.samples, prompt.sample_rate)
        stream = request.options.get("stream", STREAM.default) >= 0.5 and request.speed == 1.0
        log.info("cosyvoice %s: %d segment(s), stream=%s", plan.mode.value, len(segments), stream)
        torch.manual_seed(request.seed)  # upstream's own loop and the vocoder's noise draw from the default RNG
        seeds = torch.Generator().manual_seed(request.seed)  # the batched decoder's: per request, not shared
        for index, segment in enumerate(segments):
            gap = np.zeros(round(request.sentence_silence_s * SAMPLE_RATE) if index else 0, np.float32)
            seed = int(torch.randint(0, 2**62, (1,), generator=seeds))
            how = Pass(stream, request.speed, seed, opens=index == 0)
            pieces = self._segment(runtime, plan, segment, entry, how, guard)
            try:
                for piece_index, audio in enumerate(pieces):
                    head = gap if piece_index == 0 else gap[:0]
                    yield AudioChunk(np.concatenate([head, audio]).astype(np.float32), SAMPLE_RATE, segment)
            finally:
                pieces.close()  # a caller that leaves early must close upstream now, not whenever GC runs

    def _segment(
        self,
        runtime: UpstreamRuntime,
        plan: ModePlan,
        segment: str,
        entry: SpeakerEntry,
        how: Pass,
        guard: MemoryGuard,
    ) -> Generator[np.ndarray, None, None]:
        model_input = runtime.inputs(plan, segment_text(plan, segment), entry)
        if how.stream:
            yield from runtime.run(model_input, stream=True, speed=1.0, seed=how.seed, opens=how.opens)
            return

        def whole() -> np.ndarray:
            return _joined(runtime.run(model_input, stream=False, speed=how.speed, seed=how.seed))

        def halves() -> np.ndarray:
            words = segment.split()
            if len(words) < 2:
                return whole()
            parts = (" ".join(words[: len(words) // 2]), " ".join(words[len(words) // 2 :]))
            return np.concatenate([_joined(runtime.run(runtime.inputs(plan, segment_text(plan, p), entry),
                                                       stream=False, speed=how.speed, seed=how.seed))
                                   for p in parts])  # fmt: skip

        yield guard(whole, halves)

    def synthesize_batch(self, requests: Sequence[SpeechRequest], guard: MemoryGuard) -> Iterator[BatchEvent]:
        """The engine's micro-batch: each request on a thread of its own (reused) through ``synthesize``; their LLM
        steps join the shared decode batch. Each request keeps the caller's grad mode and CUDA device (both per
        thread)."""
        inference = torch.is_inference_mode_enabled()
        device = torch.cuda.current_device() if torch.cuda.is_available() and torch.cuda.is_initialized() else None

        @contextlib.contextmanager
        def thread_context() -> Iterator[None]:
            if device is not None:
                torch.cuda.set_device(device)
            with torch.inference_mode(inference):
                yield

        synthesize = functools.partial(self.synthesize, guard=guard)
        return concurrent_events(requests, synthesize, thread_context, self.request_threads)

    def graph_buckets(self) -> tuple[GraphBucket, ...]:
        """The LLM's decode-step graphs and the flow's and vocoder's graph shapes so far, each with the memory its
        capture added (the panel lists them; none off CUDA)."""
        if self.runtime is None:
            return ()
        runner = getattr(self.runtime.decoder, "runner", None)
        sampler = getattr(self.runtime.decoder, "sampler", None)
        steps = tuple(runner.reports) if runner is not None else ()
        steps += tuple(sampler.reports) if sampler is not None else ()
        return steps + tuple(report for graphs in self.runtime.graph_sets() for report in graphs.reports)

    def release_graphs(self) -> int:
        """Clean cache: drop the flow's and the vocoder's graphs (captured again when no request runs)."""
        graphs = self.runtime.graph_sets() if self.runtime is not None else ()
        return sum(g.release() for g in graphs)

    def _speaker(self, runtime: UpstreamRuntime, key: str, samples: np.ndarray, sample_rate: int) -> SpeakerEntry:
        """The prompt's features, from the LRU or made once (requests side by side with one new prompt share it)."""
        with self._speaker_lock:
            entry = self.speakers.get(key)
            if entry is None:
                if sample_rate != PROMPT_RATE:
                    raise InvalidPromptError("The voice prompt must be resampled to 16 kHz by intake before CosyVoice.")
                entry = runtime.speaker(samples)
                self.speakers.put(key, entry)
            return entry

    def _loaded(self) -> UpstreamRuntime:
        if self.runtime is None:
            raise BackendLoadError("The CosyVoice model is not loaded.")
        return self.runtime


def _joined(pieces: Iterator[np.ndarray]) -> np.ndarray:
    parts = list(pieces)
    return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)


def create(settings: Settings) -> CosyVoiceBackend:
    """The registry's factory: ``--cosyvoice-dir`` (or ``--model-dir``) and ``--cosyvoice-code``."""
    try:  # --backend-options fast_decode=auto|on|off,decode_slots=N,wave_slots=N,decode_kernels=auto|torch|triton,
        # decode_sampling=auto|exact|device;
        # flow_graphs, flow_tf32, flow_half, vocoder_graphs, decode_stream and first_audio_first: on|off
        wave_slots = _count(settings, "wave_slots", DEFAULT_WAVE_SLOTS)
        decode = DecodeChoice.parse(
            settings.backend_option("fast_decode", "auto"),
            settings.backend_option("decode_slots", "1"),
            settings.backend_option("decode_kernels", "auto"),
            settings.backend_option("decode_sampling", "auto"),
        )
        decode = replace(decode, own_stream=_on_off(settings, "decode_stream", default="off"))
        flow_half = _on_off(settings, "flow_half", default="on")
        flow_graphs, flow_tf32, vocoder_graphs, first_audio_first = (
            _on_off(settings, name) for name in ("flow_graphs", "flow_tf32", "vocoder_graphs", "first_audio_first")
        )
    except ValueError as exc:
        raise BackendLoadError(f"CosyVoice backend option: {exc}.") from exc
    problem = preflight(settings)
    if problem:
        raise BackendLoadError(problem)
    model_dir = Path(model_dir_of(settings))
    config = CosyVoiceConfig(model_dir, settings.cosyvoice_code, settings.profile_cache_size, decode.slots)
    load = functools.partial(
        load_runtime,
        decode=decode,
        flow_graphs=flow_graphs,
        flow_tf32=flow_tf32,
        flow_half=flow_half,
        first_audio_first=first_audio_first,
        wave_slots=wave_slots,
        vocoder_graphs=vocoder_graphs,
    )
    return CosyVoiceBackend(config, load)


def _count(settings: Settings, name: str, default: int) -> int:
    """A backend option that is a whole number, 0 or more; ``ValueError`` with one sentence otherwise."""
    value = settings.backend_option(name, str(default))
    if not value.isdigit():
        raise ValueError(f"{name} must be a whole number (0 or more), not {value!r}")
    return int(value)


def _on_off(settings: Settings, name: str, default: str = "on") -> bool:
    """A backend option that is ``on`` or ``off``; ``ValueError`` with one sentence otherwise."""
    value = settings.backend_option(name, default)
    if value not in ("on", "off"):
        raise ValueError(f"{name} must be on or off, not {value!r}")
    return value == "on"
