"""EngineCore: the model side of the engine, usable in one process (tests and the in-process client drive it).

The process wrapper (proc.py) adds spawn, the READY handshake and pipes around it.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
import torch

from voicelab.backends.base import (
    AudioChunk,
    Backend,
    BatchedBackend,
    BatchEvent,
    Capabilities,
    GraphBucket,
    SpeechRequest,
    run_plainly,
)
from voicelab.backends.registry import create_backend
from voicelab.backends.scripts import languages_in
from voicelab.engine import heap, memory
from voicelab.engine.chunk_render import render_many, voiced_chunks
from voicelab.engine.fit_relay import FitRelay, ProgressSink
from voicelab.engine.messages import (
    AllocatorStats,
    CleanReport,
    ControlKind,
    ControlRequest,
    SegmentSnapshot,
    SynthesisRequest,
    SynthesisResult,
    WorkerReady,
)
from voicelab.engine.scoring import CloneScores
from voicelab.engine.validation import AUTO_LANGUAGE, validate_request
from voicelab.engine.voicing import Finished, VoicePlan, VoiceStage, join_chunks
from voicelab.errors import BackendLoadError, BackendRuntimeError
from voicelab.instruct.style import Gender, Style
from voicelab.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")
EmitChunk = Callable[[AudioChunk, float], None]  # a chunk and the seconds since the job started
EmitBatchChunk = Callable[[int, AudioChunk, float], None]  # the job's place in its batch, a chunk, the seconds
JobDone = Callable[[int, "SynthesisResult | Exception"], None]  # the job's place in its batch and how it ended


@dataclass
class _Job:
    """One job while it runs: its validated request, voicing plan and the audio so far."""

    request: SynthesisRequest
    seed: int
    languages: tuple[str, ...]
    plan: VoicePlan
    started: float
    relay: FitRelay
    drafts: list[np.ndarray] = field(default_factory=list)
    outputs: list[np.ndarray] = field(default_factory=list)
    first_audio_s: float = 0.0
    batch_size: int = 1


WARMUP_TEXTS = {"en": "Warming up.", "zh": "预热一下。"}
DTYPES = ("float32", "bfloat16", "float16")


class EngineCore:
    """Loads one backend on one device and runs requests one at a time, under inference mode."""

    # Every model call runs under this; the soak benchmark's naive mode swaps it to show what it saves.
    grad_mode: Callable[[], AbstractContextManager[Any]] = torch.inference_mode
    progress_sink: ProgressSink | None = None  # where a job's JobProgress goes (the worker's pipe, the job itself)

    def __init__(self, settings: Settings) -> None:
        if settings.dtype not in DTYPES:
            raise BackendLoadError(f"Unknown dtype '{settings.dtype}'; use one of {', '.join(DTYPES)}.")
        self.settings = settings
        self.device = memory.resolve_device(settings.device)
        if self.device.startswith("cuda:"):  # one worker per device: calls that name no device go to this one
            torch.cuda.set_device(self.device)
        memory.cap_plan_cache(self.device)
        self.dtype = settings.dtype if self.device != "cpu" or settings.dtype == "float32" else "float32"
        if settings.torch_threads > 0:
            torch.set_num_threads(settings.torch_threads)
        started = time.perf_counter()
        self.heap_policy = heap.HeapPolicy()  # the soak's naive control turns trimming off
        heap.configure_heap(self.heap_policy, os.environ)  # before the model loads and torch starts threads
        self.backend: Backend = create_backend(settings, self.device)
        self.capabilities: Capabilities = self.backend.capabilities
        self.backend.load(self.device, self.dtype)
        self._heartbeat_monitor = memory.AllocatorMonitor(self.device)
        self._job_monitor = memory.AllocatorMonitor(self.device)
        self.voice = VoiceStage(self.device, settings.profile_cache_size, settings.voice_renderer, settings.cuda_graphs)
        self.largest_free_block: int | None = None
        self.warm_up()
        self.loaded = True
        self.load_s = time.perf_counter() - started
        self.leak_warning: str | None = None
        self.leak_watch = memory.LeakWatch(int(settings.leak_warn_mib * 2**20))
        self.rss_watch = heap.RssWatch(int(settings.rss_warn_mib * 2**20))
        self._device_leak: str | None = None
        self._last_auto_clean: AllocatorStats | None = None  # what the last automatic clean left
        self.hygiene = memory.HygienePolicy(
            enabled=settings.auto_clean, cached_share=settings.auto_clean_cached_share,
            cached_bytes=int(settings.auto_clean_cached_mib * 2**20), fragmentation=settings.auto_clean_fragmentation,
        )  # fmt: skip

    def ready_message(self) -> WorkerReady:
        return WorkerReady(os.getpid(), self.backend.name, self.device, self.dtype, self.capabilities, self.load_s)

    def warm_up(self) -> None:
        """One short synthesis per language so the first user request doesn't pay for lazy initialisation."""
        with self.grad_mode():
            for language in self.capabilities.languages:
                text = WARMUP_TEXTS.get(language, WARMUP_TEXTS["en"])
                for _ in self.backend.synthesize(SpeechRequest(text, language)):
                    pass

    def offload(self) -> None:
        """Give the device memory back while idle; the next job loads the model again."""
        if not self.loaded:
            return
        self.voice.unload()
        self.backend.unload()
        memory.clean_device_cache(self.device, ())
        self.loaded = False
        log.info("model offloaded after being idle")

    def _ensure_loaded(self) -> None:
        if not self.loaded:
            self.backend.load(self.device, self.dtype)
            self.warm_up()
            self.loaded = True
            log.info("model loaded again")

    def synthesize(self, request: SynthesisRequest) -> SynthesisResult:
        """The whole job at once (tests, tools); ``run`` streams its chunks."""
        return self.run(request)

    def run(self, request: SynthesisRequest, emit: EmitChunk | None = None) -> SynthesisResult:
        """Validate, voice and synthesise one request; ``emit`` gets each finished chunk as it is ready."""
        started = time.perf_counter()
        self._ensure_loaded()
        memory.reset_peak(self.device)
        with self.grad_mode():
            job = self._prepare(request, started)
            for chunk, rendered in voiced_chunks(job.plan, self._chunks(job.plan)):
                self._take(job, chunk, emit, rendered)
            return self._result(job)

    def run_batch(self, requests: Sequence[SynthesisRequest], emit: EmitBatchChunk, done: JobDone) -> None:
        """Several jobs as one padded batch where the backend can (``Capabilities.batching``), else one by one.

        ``emit(i, chunk, elapsed)`` gets job i's chunks in order; ``done(i, result_or_error)`` is called exactly once
        per job, as soon as it is finished (a short job does not wait for a long one); a job that fails fails alone.
        """
        batched = self.capabilities.batching and hasattr(self.backend, "synthesize_batch")
        if len(requests) == 1 or not batched:
            for i, request in enumerate(requests):
                try:
                    done(i, self.run(request, functools.partial(emit, i)))
                except Exception as exc:
                    done(i, exc)
            return
        started = time.perf_counter()
        self._ensure_loaded()
        memory.reset_peak(self.device)
        with self.grad_mode():
            jobs: dict[int, _Job] = {}
            for i, request in enumerate(requests):
                try:
                    jobs[i] = self._prepare(request, started)
                except Exception as exc:
                    done(i, exc)
            for job in jobs.values():
                job.batch_size = len(requests)
            if jobs:
                self._run_jobs(jobs, emit, done)

    def _run_jobs(self, jobs: dict[int, _Job], emit: EmitBatchChunk, done: JobDone) -> None:
        """The backend's batch events routed to each job; whatever is left at the end fails with a reason."""
        order = list(jobs)
        batched: BatchedBackend = self.backend  # type: ignore[assignment]
        events = batched.synthesize_batch([jobs[i].plan.speech for i in order], self._guard)
        batch: list[tuple[int, BatchEvent]] = []
        try:
            for event in events:
                batch.append((order[event.index], event))
                if event.batch_end is not False:  # a device batch is complete (or the backend does not say)
                    self._voice_batch(batch, jobs, emit, done)
                    batch = []
            self._voice_batch(batch, jobs, emit, done)
        except Exception as exc:  # the batch as a whole broke: every job still running shares the error
            for i in list(jobs):
                done(i, exc)
            return
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()
        for i in jobs:
            done(i, BackendRuntimeError("The voice stopped before finishing this text; please try again."))

    def _voice_batch(
        self, batch: list[tuple[int, BatchEvent]], jobs: dict[int, _Job], emit: EmitBatchChunk, done: JobDone
    ) -> None:
        """One device batch's events: its chunks voiced together, then the jobs it finished scored together."""
        for i, event in batch:
            if event.error is not None and jobs.pop(i, None) is not None:
                done(i, event.error)
        chunks = [(i, e.chunk) for i, e in batch if i in jobs and e.chunk is not None]
        try:
            rendered: list[np.ndarray | None] = list(render_many([(jobs[i].plan, c) for i, c in chunks]))
        except Exception:  # voiced one by one below, so a chunk that cannot be voiced fails only its job
            rendered = [None] * len(chunks)
        for (i, chunk), audio in zip(chunks, rendered, strict=True):
            try:
                self._take(jobs[i], chunk, functools.partial(emit, i), audio)
            except Exception as exc:
                jobs.pop(i, None)
                done(i, exc)
        self._finish_batch([i for i, e in batch if e.last and i in jobs], jobs, done)

    def _finish_batch(self, finishing: list[int], jobs: dict[int, _Job], done: JobDone) -> None:
        """The jobs one device batch finished, scored in one speaker-encoder batch, answered one by one."""
        finished = [Finished.joined(jobs[i].drafts, jobs[i].outputs, jobs[i].plan) for i in finishing]
        try:
            scores = self.voice.scores_many(finished, self.capabilities.sample_rate)
        except Exception:  # each job is then scored alone in _result, so a failure fails only its job
            scores = None
        for k, i in enumerate(finishing):
            job = jobs.pop(i)
            try:
                done(i, self._result(job) if scores is None else self._result(job, finished[k], scores[k]))
            except Exception as exc:
                done(i, exc)

    def _prepare(self, request: SynthesisRequest, started: float) -> _Job:
        """Validate once, fix the seed and languages, and plan the voicing (profile built or found)."""
        request = validate_request(request, self.capabilities, self.settings.max_text_chars)
        seed = request.seed if request.seed is not None else secrets.randbelow(2**31)
        languages = self.languages_of(request)
        if len(self.capabilities.languages) == 1:
            request = replace(request, language=languages[0])
        plan = self.voice.plan(request, languages, seed, self.capabilities, self._calibration)
        relay = FitRelay(request.job_id, self.progress_sink, self.voice)
        return _Job(request, seed, languages, replace(plan, speech=replace(plan.speech, on_fit=relay)), started, relay)

    def _take(self, job: _Job, chunk: AudioChunk, emit: EmitChunk | None, rendered: np.ndarray | None = None) -> None:
        """Voice one chunk (matching, styling; ``rendered``: already voiced with its batch) and pass it on at once."""
        job.drafts.append(chunk.audio)
        if rendered is None:
            rendered = job.plan.render(chunk.audio, chunk.sample_rate, chunk.language)
        voiced = np.clip(rendered, -1.0, 1.0).astype(np.float32)
        job.outputs.append(voiced)
        elapsed = time.perf_counter() - job.started
        job.first_audio_s = job.first_audio_s or elapsed
        if emit is not None:
            emit(replace(chunk, audio=voiced), elapsed)

    def _result(
        self, job: _Job, finished: Finished | None = None, scores: CloneScores | None = None
    ) -> SynthesisResult:
        """The finished job's result; ``finished`` and its ``scores`` where its batch joined and scored it."""
        request, sample_rate = job.request, self.capabilities.sample_rate
        if finished is None:
            finished = Finished.joined(job.drafts, job.outputs, job.plan)
            scores = self.voice.scores(finished.draft, finished.output, sample_rate, job.plan)
        audio, draft = finished.output, finished.draft
        style_check = self.voice.style_check(draft, audio, sample_rate, job.plan, self._calibration)
        return SynthesisResult(
            job_id=request.job_id,
            audio=audio,
            sample_rate=sample_rate,
            latency_s=time.perf_counter() - job.started,
            backend=self.backend.name,
            device=self.device,
            dtype=self.dtype,
            first_audio_s=job.first_audio_s,
            chunks=len(job.outputs),
            language="+".join(job.languages),
            peak_allocated_bytes=memory.allocator_stats(self.device).peak_allocated,
            similarity=scores.similarity if scores else None,
            similarity_base=scores.similarity_base if scores else None,
            similarity_ge2e=scores.similarity_ge2e if scores else None,
            similarity_ge2e_base=scores.similarity_ge2e_base if scores else None,
            f0_prompt_hz=scores.f0_prompt_hz if scores else None,
            f0_output_hz=scores.f0_output_hz if scores else None,
            style=request.style,
            seed=job.seed,
            notices=job.plan.notices,
            profile_cache=self.voice.cache_stats(),
            style_check=style_check,
            batch_size=job.batch_size,
            fitted=job.relay.style or job.plan.speech.fitted,
        )

    def languages_of(self, request: SynthesisRequest) -> tuple[str, ...]:
        """The languages this request will be spoken in: the one asked for, or those of its letters ("auto")."""
        if request.language != AUTO_LANGUAGE:
            return (request.language,)
        spoken = self.capabilities.languages
        found = tuple(language for language in languages_in(request.text) if language in spoken)
        return found or spoken[:1]

    def _chunks(self, plan: VoicePlan) -> Iterator[AudioChunk]:
        """The backend's chunks, its generator closed in every case so its per-request state is released."""
        chunks = self.backend.synthesize(plan.speech, self._guard)
        try:
            yield from chunks
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    def _calibration(self, language: str, text: str, gender: Gender | None = None) -> tuple[np.ndarray, int]:
        """The backend voice (of ``gender``, where it has one) saying ``text`` plainly (``calibration.Calibrate``)."""
        request = SpeechRequest(text, language, style=Style(gender=gender), sentence_silence_s=0.0)
        chunks = self.backend.synthesize(request, run_plainly)
        return join_chunks([c.audio for c in chunks]), self.capabilities.sample_rate

    def _guard(self, full: Callable[[], T], pieces: Callable[[], T]) -> T:
        return memory.run_with_oom_retry(full, pieces, lambda: self.clean_cache(False))

    def graph_buckets(self) -> tuple[GraphBucket, ...]:
        """The backend's CUDA graph buckets, if it captures any, and the voice renderer's (for the panel)."""
        report: Callable[[], tuple[GraphBucket, ...]] = getattr(self.backend, "graph_buckets", tuple)
        return report() + self.voice.graph_buckets()

    def stats(self) -> AllocatorStats:
        """For the heartbeat and control requests; job-side hygiene uses its own monitor so no delta is lost."""
        return replace(self._heartbeat_monitor.sample(), largest_free_block=self.largest_free_block)

    def snapshot(self) -> SegmentSnapshot:
        """The allocator's segment map; its largest free block is reported with every later sample."""
        snapshot = memory.segment_snapshot(self.device)
        self.largest_free_block = snapshot.largest_free_block
        return snapshot

    def clean_cache(self, clear_profiles: bool, release_graphs: bool = True) -> CleanReport:
        """Clean cache and the OOM retry's clean also drop CUDA graph pools, which ``empty_cache`` cannot free
        (the automatic clean between jobs keeps them: recapturing after every clean would cost each time)."""
        cleanups: list[tuple[str, Callable[[], object]]] = []
        if clear_profiles:
            cleanups.append(("speaker profiles", self.voice.clear_profiles))
        if release_graphs and self.graph_buckets():
            backend_release: Callable[[], int] = getattr(self.backend, "release_graphs", lambda: 0)
            cleanups.append(("CUDA graph pools (captured again on next use)", backend_release))
            voice_graphs = "the voice stage's CUDA graphs: renderer and scoring (captured again on their second use)"
            cleanups.append((voice_graphs, self.voice.release_graphs))
        return memory.clean_device_cache(self.device, cleanups)

    def after_job(self) -> CleanReport | None:
        """Hygiene between jobs: freed host heap back to the OS, clean when the policy says so; feed the watches."""
        heap.trim_after_job(self.heap_policy)
        # Threads, models loaded on first use and captured graphs each bring memory once: not a leak (GrowthWatch)
        holders = threading.active_count() + self.voice.loaded_parts() + len(self.graph_buckets())
        stats = self._job_monitor.sample()
        warning = self.leak_watch.observe(stats, holders)
        self._device_leak = warning.message if warning is not None else self._device_leak
        host = self.rss_watch.observe(stats.worker_rss, holders)
        self.leak_warning = " ".join(m for m in (self._device_leak, host and host.message) if m) or None
        reason = self.hygiene.should_clean(stats, memory.device_total(self.device), self._last_auto_clean)
        if reason is None:
            return None
        log.info("automatic clean: %s", reason)
        report = memory.clean_device_cache(self.device, thorough=False)
        self._last_auto_clean = report.after
        return report

    def control(self, request: ControlRequest) -> CleanReport | SegmentSnapshot | AllocatorStats | None:
        handlers: dict[ControlKind, Callable[[], CleanReport | SegmentSnapshot | AllocatorStats | None]] = {
            ControlKind.CLEAN_CACHE: lambda: self.clean_cache(request.clear_profiles),
            ControlKind.SNAPSHOT: self.snapshot,
            ControlKind.STATS: self.stats,
            ControlKind.SHUTDOWN: lambda: None,
        }
        return handlers[request.kind]()

    def close(self) -> None:
        self.voice.unload()
        self.backend.unload()
        memory.clean_device_cache(self.device, ())
