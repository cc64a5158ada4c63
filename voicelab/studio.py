"""The generation service: the one place that turns what a user asked into speech, for every front end.

Gradio handlers, the CLI, the benchmarks and the HTTP API all call ``GenerationService``: it validates once
(text, language, controls, backend options, the prompt clip through intake, the instruction through the
parser), submits through an ``Engine`` (the worker client or the in-process one), saves each take to History
and returns a typed ``Generation``, or streams the first take's chunks as they are ready. Gradio-free.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from voicelab.backends.base import Capabilities
from voicelab.engine.api import Engine
from voicelab.engine.jobs import Job
from voicelab.engine.messages import (
    ChunkReady,
    JobProgress,
    SynthesisRequest,
    SynthesisResult,
    WorkerReady,
    new_job_id,
)
from voicelab.engine.validation import validate_request
from voicelab.errors import InvalidPromptError, InvalidSettingError, JobTimeoutError, StorageError
from voicelab.history import History, HistoryEntry
from voicelab.instruct.controls import resolve_style
from voicelab.instruct.parser import ParsedInstruction
from voicelab.instruct.style import Style
from voicelab.lru import BoundedLRU
from voicelab.settings import Settings
from voicelab.style_words import with_style_words
from voicelab.voice.fitted import FittedStyle
from voicelab.voice.intake import PromptIntake
from voicelab.voice.prompt import PromptAudio
from voicelab.voices import SavedVoice, fitted_voice, keep_fitted_voice

log = logging.getLogger(__name__)

MAX_TAKES = 4
FITTED_UPLOADS = 64  # voices fitted to clips that are not saved voices, kept by the server (256 floats each)
MAX_WAIT_S = 86400.0  # a timeout past what the platform's clock can hold would raise, not wait
QUEUE_POLL_S = 0.1  # how often a queued job's place in line is looked at


class JobTimeline(Protocol):
    """Where finished jobs are marked (the telemetry sampler's memory timeline)."""

    def mark_job(self, job_id: str, latency_s: float) -> None: ...


@dataclass(frozen=True)
class PromptClip:
    """A voice prompt as a user gives it: a file path or the file's bytes, and an optional transcript.

    saved: the saved voice it is (its clip and transcript), whose fitted voice, if any, travels with the request
    and where a voice fitted now is kept."""

    source: str | Path | bytes
    transcript: str = ""
    saved: SavedVoice | None = None


@dataclass(frozen=True)
class GenerationRequest:
    """What a user asked, from any front end.

    kind: the History label ("speak", "clone", "design", "api", "cli").
    language: "auto" or a language code. prompt: a clip to clone, or an already loaded ``PromptAudio``.
    instruction: natural-language style (English or Chinese); style: explicit controls that override it.
    speed: speaking-rate multiplier (0.25-4). seed: ``None`` for a fresh one per take. takes: 1-4.
    options: the backend's own controls by ``OptionSpec`` name (e.g. Piper's noise_scale).
    owner: the login it is saved under in History ("" without ``--auth``).
    """

    text: str
    kind: str = "speak"
    language: str = "auto"
    prompt: PromptClip | PromptAudio | None = None
    instruction: str = ""
    style: Style = field(default_factory=Style)
    speed: float = 1.0
    seed: int | None = None
    takes: int = 1
    sentence_silence_s: float = 0.2
    options: Mapping[str, float] = field(default_factory=dict)
    owner: str = ""


@dataclass(frozen=True)
class Queued:
    """A streamed job still waiting: ``ahead`` jobs run before it (the one in flight included).

    no_worker: it waits for a worker that is still loading (or restarting), not for other jobs.
    """

    ahead: int
    waited_s: float
    no_worker: bool = False


@dataclass(frozen=True)
class Take:
    """One finished generation; ``entry`` is ``None`` when History could not keep it (``storage_error`` says why)."""

    request: SynthesisRequest
    result: SynthesisResult
    entry: HistoryEntry | None
    storage_error: str | None = None


@dataclass(frozen=True)
class PreparedGeneration:
    """A validated request: one engine request per take, the parsed instruction and the loaded prompt (with the
    saved voice it came from, where the voice fitted to it is kept)."""

    requests: tuple[SynthesisRequest, ...]
    parsed: ParsedInstruction
    prompt: PromptAudio | None
    kind: str
    owner: str = ""
    saved: SavedVoice | None = None


@dataclass(frozen=True)
class Generation:
    takes: tuple[Take, ...]
    parsed: ParsedInstruction
    prompt: PromptAudio | None

    @property
    def first(self) -> Take:
        return self.takes[0]


class GenerationService:
    """One per server; holds the engine, History, the timeline of finished jobs and the prompt intake."""

    def __init__(
        self, engine: Engine, history: History | None, settings: Settings, timeline: JobTimeline | None = None
    ) -> None:
        self.engine = engine
        self.history = history
        self.settings = settings
        self.timeline = timeline
        self.intake = PromptIntake()  # a clip used again is not decoded and checked again
        # A voice fitted to an uploaded clip, held here so that a Soft restart or a new worker does not fit it again
        # (a saved voice keeps its fit on disk instead).
        self.fitted_uploads: BoundedLRU[FittedStyle] = BoundedLRU(FITTED_UPLOADS)
        self._ready: WorkerReady | None = None

    @property
    def wait_s(self) -> float:
        """How long a caller waits: every queued job may use its full timeout before ours runs (a day at most)."""
        return min(self.settings.job_timeout_s * (self.settings.queue_size + 1) + 30.0, MAX_WAIT_S)

    def capabilities(self) -> Capabilities:
        """The loaded backend's capabilities, waiting for the first worker to be ready (raises its load error)."""
        return self.backend().capabilities

    def backend(self) -> WorkerReady:
        """The first worker's READY (backend name, device, capabilities); kept: a restart loads the same backend,
        unless it switched the voice engine (``forget_backend``)."""
        if self._ready is None:
            self._ready = self.engine.wait_ready(self.wait_s)
        return self._ready

    def forget_backend(self) -> None:
        """After a switch of the voice engine (``studio_engine.switch_engine``): the next ``backend()`` asks again."""
        self._ready = None

    def prepare(self, request: GenerationRequest) -> PreparedGeneration:
        """Validate everything once, before anything is queued; raises the user's sentence."""
        if not 1 <= request.takes <= MAX_TAKES:
            raise InvalidSettingError(f"Takes must be between 1 and {MAX_TAKES}.")
        prompt = self._prompt(request.prompt)
        saved = request.prompt.saved if isinstance(request.prompt, PromptClip) else None
        parsed = resolve_style(request.instruction, request.style)
        instruction = request.instruction
        if self.capabilities().native_instructions:  # the dropdowns reach the model as words it reads
            instruction = with_style_words(request.instruction, request.style, request.text)
        base = SynthesisRequest(
            text=request.text,
            language=request.language,
            speed=request.speed,
            seed=request.seed,
            prompt=prompt,
            style=parsed.style,
            instruction=instruction,
            sentence_silence_s=request.sentence_silence_s,
            options=dict(request.options),
            fitted=self._fitted(prompt, saved),
        )
        checked = validate_request(base, self.capabilities(), self.settings.max_text_chars)
        requests = [checked]
        for take in range(1, request.takes):
            seed = None if checked.seed is None else checked.seed + take
            requests.append(replace(checked, seed=seed, job_id=new_job_id(), submitted_at=time.monotonic()))
        return PreparedGeneration(tuple(requests), parsed, prompt, request.kind, request.owner, saved)

    def generate(self, request: GenerationRequest) -> Generation:
        """Every take, whole: side by side on as many devices as the engine has, one after another on one
        (so one user's takes never hold more of the queue that other users share than there are devices)."""
        prepared = self.prepare(request)
        window = max(len(self.engine.status().workers), 1)
        pending: deque[Job] = deque()
        takes: list[Take] = []
        for job_request in prepared.requests:
            if len(pending) >= window:
                takes.append(self._finish(pending.popleft(), prepared))
            pending.append(self.engine.submit(job_request))
        takes.extend(self._finish(job, prepared) for job in pending)
        return Generation(tuple(takes), prepared.parsed, prepared.prompt)

    def stream(self, prepared: PreparedGeneration) -> Iterator[ChunkReady | Take]:
        """The first take's chunks as they are ready, then its finished ``Take``."""
        job = self.engine.submit(prepared.requests[0])
        yield from job.chunks(timeout=self.wait_s)
        yield self._finish(job, prepared)

    def follow(self, prepared: PreparedGeneration) -> Iterator[Queued | JobProgress | ChunkReady | Take]:
        """As ``stream``, after the job's place in line each time it changes while it waits, and with its progress
        before the first chunk (a voice being fitted: "fitting voice: step 40 of 120"), for the UI."""
        job = self.engine.submit(prepared.requests[0])
        yield from self._waiting(job)
        yield from job.events(timeout=self.wait_s)
        yield self._finish(job, prepared)

    def _waiting(self, job: Job) -> Iterator[Queued]:
        submitted, last = time.monotonic(), (-1, -1)
        while not job.running() and not job.done():
            view = self.engine.queue_view()
            ahead = view.ahead_of(job.job_id)
            if ahead is None:
                return
            waited = time.monotonic() - submitted
            if (ahead, int(waited)) != last and (ahead or view.waiting_for_worker or waited >= 1.0):
                last = (ahead, int(waited))
                yield Queued(ahead, waited, view.waiting_for_worker)
            time.sleep(QUEUE_POLL_S)

    def _prompt(self, prompt: PromptClip | PromptAudio | None) -> PromptAudio | None:
        if prompt is None or isinstance(prompt, PromptAudio):
            return prompt
        if isinstance(prompt.source, (str, Path)) and not str(prompt.source):
            raise InvalidPromptError("Please upload or record a voice prompt first.")
        max_bytes = self.settings.max_upload_mb * 2**20
        return self.intake.load(prompt.source, prompt.transcript.strip(), max_bytes=max_bytes)

    def _fitted(self, prompt: PromptAudio | None, saved: SavedVoice | None) -> FittedStyle | None:
        """The voice the backend fitted to this clip before, if one was kept: with the saved voice, or here."""
        backend = self.backend().backend
        if saved is not None:
            return fitted_voice(saved, backend)
        return self.fitted_uploads.get(f"{backend}:{prompt.sha256}") if prompt is not None else None

    def _keep_fitted(self, saved: SavedVoice | None, request: SynthesisRequest, result: SynthesisResult) -> None:
        """A voice the engine fitted is kept: with a saved voice, on disk, once (a failed write costs a later fit);
        for an uploaded clip, in ``fitted_uploads``."""
        if result.fitted is None or result.fitted == request.fitted:
            return
        if saved is None:
            self.fitted_uploads.put(f"{result.fitted.backend}:{result.fitted.prompt_sha256}", result.fitted)
            return
        try:
            keep_fitted_voice(saved, result.fitted)
        except StorageError as exc:
            log.warning("fitted voice of %s not kept: %s", saved.voice_id, exc)

    def _finish(self, job: Job, prepared: PreparedGeneration) -> Take:
        try:
            result = job.result(self.wait_s)
        except FutureTimeout as exc:
            raise JobTimeoutError("The engine did not answer in time; please try again.") from exc
        if self.timeline is not None:
            self.timeline.mark_job(result.job_id, result.latency_s)
        self._keep_fitted(prepared.saved, job.request, result)
        if self.history is None:
            return Take(job.request, result, None)
        try:
            return Take(job.request, result, self.history.save(job.request, result, prepared.kind, prepared.owner))
        except StorageError as exc:
            log.warning("generation %s not kept: %s", result.job_id, exc)
            return Take(job.request, result, None, str(exc))
