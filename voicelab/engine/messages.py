"""Everything that crosses the server/worker process boundary: frozen dataclasses only.

Domain types live with their owners (``PromptAudio`` in ``voice.prompt``, ``Capabilities`` and ``AudioChunk`` in
``backends.base``, ``ProfileCacheStats`` in ``voice.cache``); this module only composes them into messages.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from voicelab.backends.base import AudioChunk, Capabilities, GraphBucket
from voicelab.instruct.check import StyleCheck
from voicelab.instruct.style import Style
from voicelab.voice.cache import ProfileCacheStats
from voicelab.voice.fitted import FittedStyle
from voicelab.voice.prompt import PromptAudio


def new_job_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class SynthesisRequest:
    """One generation as the engine receives it (already validated by ``voicelab.validation``).

    text: what to say. language: "auto" (routed by script) or one of the backend's languages.
    speed: speaking-rate multiplier on top of the style's (1 = the voice's own).
    seed: ``None`` draws a fresh one, reported in the result. prompt: a voice to clone.
    style / instruction: how to say it; rendered natively or by the engine's DSP stage (see ``Capabilities``).
    sentence_silence_s: silence between sentences. options: the backend's own controls (``OptionSpec`` names).
    fitted: the prompt's voice as the backend fitted it before (a saved voice's), so it is not fitted again.
    """

    text: str
    language: str = "auto"
    speed: float = 1.0
    seed: int | None = None
    prompt: PromptAudio | None = None
    style: Style = field(default_factory=Style)
    instruction: str = ""
    sentence_silence_s: float = 0.2
    options: Mapping[str, float] = field(default_factory=dict)
    fitted: FittedStyle | None = None
    job_id: str = field(default_factory=new_job_id)
    submitted_at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class SynthesisBatch:
    """Compatible jobs the worker runs as one padded batch; each still gets its own chunks and result."""

    requests: tuple[SynthesisRequest, ...]


@dataclass(frozen=True)
class ChunkReady:
    """A piece of a job's audio, sent as soon as it is ready (``index`` counts from 0, in order)."""

    job_id: str
    index: int
    chunk: AudioChunk
    elapsed_s: float


@dataclass(frozen=True)
class SynthesisResult:
    """Audio plus the figures a user sees. Clone scores are ``None`` without a prompt.

    first_audio_s: from the job's start on the worker to its first chunk (time to first audio).
    similarity: ECAPA-TDNN cosine to the prompt (``judges.ecapa``), a judge the voice matching never reads.
    similarity_base: the same for the backend voice before matching (``None`` when the backend clones natively).
    similarity_ge2e / similarity_ge2e_base: the GE2E cosines the match search maximises, reported beside.
    batch_size: how many jobs ran in the device batch this one was part of (1: alone).
    fitted: the voice the backend fitted to the prompt and spoke with (``None`` where it fits none), to be kept.
    """

    job_id: str
    audio: np.ndarray
    sample_rate: int
    latency_s: float
    backend: str
    device: str
    dtype: str
    first_audio_s: float = 0.0
    chunks: int = 1
    language: str = ""
    queue_wait_s: float = 0.0
    peak_allocated_bytes: int = 0
    similarity: float | None = None
    similarity_base: float | None = None
    similarity_ge2e: float | None = None
    similarity_ge2e_base: float | None = None
    f0_prompt_hz: float | None = None
    f0_output_hz: float | None = None
    style: Style = field(default_factory=Style)
    seed: int | None = None
    notices: tuple[str, ...] = ()
    profile_cache: ProfileCacheStats | None = None
    style_check: StyleCheck | None = None  # requested vs measured style figures (engine-rendered styles only)
    batch_size: int = 1
    fitted: FittedStyle | None = None

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.sample_rate

    @property
    def rtf(self) -> float:
        """Real-time factor: synthesis seconds per audio second (lower is faster)."""
        return self.latency_s / self.duration_s if self.duration_s > 0 else float("inf")

    def metrics(self) -> dict[str, Any]:
        """JSON-ready figures (no audio)."""
        return {
            "job_id": self.job_id,
            "sample_rate": self.sample_rate,
            "duration_s": round(self.duration_s, 3),
            "latency_s": round(self.latency_s, 4),
            "first_audio_s": round(self.first_audio_s, 4),
            "chunks": self.chunks,
            "rtf": round(self.rtf, 4),
            "queue_wait_s": round(self.queue_wait_s, 4),
            "batch_size": self.batch_size,
            "backend": self.backend,
            "language": self.language,
            "device": self.device,
            "dtype": self.dtype,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "similarity": _round(self.similarity),
            "similarity_base": _round(self.similarity_base),
            "similarity_ge2e": _round(self.similarity_ge2e),
            "similarity_ge2e_base": _round(self.similarity_ge2e_base),
            "f0_prompt_hz": _round(self.f0_prompt_hz, 1),
            "f0_output_hz": _round(self.f0_output_hz, 1),
            "style": self.style.to_dict(),
            "seed": self.seed,
            "notices": list(self.notices),
        }


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True)
class AllocatorStats:
    """PyTorch allocator figures from the worker (docs/ARCHITECTURE.md, Telemetry). Zero on CPU.

    fragmentation = non_releasable / cached_free (0 when nothing is cached).
    alloc_retries and ooms are deltas since the previous sample.
    """

    device: str
    allocated: int = 0
    reserved: int = 0
    non_releasable: int = 0
    peak_allocated: int = 0
    alloc_retries: int = 0
    ooms: int = 0
    largest_free_block: int | None = None  # from the latest segment snapshot ("Inspect memory"); None before one
    worker_pid: int = 0
    worker_rss: int = 0
    timestamp: float = field(default_factory=time.time)

    @property
    def cached_free(self) -> int:
        return max(self.reserved - self.allocated, 0)

    @property
    def fragmentation(self) -> float:
        return self.non_releasable / self.cached_free if self.cached_free > 0 else 0.0


@dataclass(frozen=True)
class MemoryBlock:
    size: int
    state: str  # "active_allocated", "active_awaiting_free" or "inactive"


@dataclass(frozen=True)
class MemorySegment:
    address: int
    total_size: int
    segment_type: str  # "large" or "small"
    blocks: tuple[MemoryBlock, ...]


@dataclass(frozen=True)
class SegmentSnapshot:
    """The allocator's segment map, for the "Inspect memory" picture."""

    device: str
    segments: tuple[MemorySegment, ...]
    timestamp: float = field(default_factory=time.time)

    @property
    def largest_free_block(self) -> int:
        return max((b.size for s in self.segments for b in s.blocks if b.state == "inactive"), default=0)


class ControlKind(StrEnum):
    CLEAN_CACHE = "clean_cache"
    SNAPSHOT = "snapshot"
    STATS = "stats"
    SHUTDOWN = "shutdown"


@dataclass(frozen=True)
class ControlRequest:
    """Runs in the worker between jobs."""

    kind: ControlKind
    clear_profiles: bool = False
    request_id: str = field(default_factory=new_job_id)


@dataclass(frozen=True)
class CleanReport:
    before: AllocatorStats
    after: AllocatorStats
    cleared: tuple[str, ...]
    duration_s: float


@dataclass(frozen=True)
class ControlReply:
    request_id: str
    payload: CleanReport | SegmentSnapshot | AllocatorStats | None


@dataclass(frozen=True)
class ErrorReply:
    """A failed job or control request; ``error_type`` names a class in ``voicelab.errors``."""

    request_id: str
    error_type: str
    message: str


@dataclass(frozen=True)
class WorkerReady:
    """The READY handshake: sent once the model is loaded and warmed up."""

    pid: int
    backend: str
    device: str
    dtype: str
    capabilities: Capabilities
    load_s: float


@dataclass(frozen=True)
class JobProgress:
    """What a job is doing before its first chunk, e.g. "fitting voice", step 40 of 120 (sent as it goes)."""

    job_id: str
    stage: str
    step: int
    total: int

    def line(self) -> str:
        return f"{self.stage}: step {self.step} of {self.total}"


@dataclass(frozen=True)
class JobAccepted:
    """The worker has the job: from now on a worker death fails it; before, the job is simply requeued."""

    job_id: str


@dataclass(frozen=True)
class Heartbeat:
    """Sent every second by the worker, also while a job runs."""

    stats: AllocatorStats
    leak_warning: str | None = None
    profile_cache: ProfileCacheStats | None = None
    model_loaded: bool = True
    graphs: tuple[GraphBucket, ...] = ()  # the backend's CUDA graph buckets (sizes, memory, kept or not)
