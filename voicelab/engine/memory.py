"""Worker-side GPU memory hygiene: allocator statistics, segment maps, cache cleaning, OOM retry.

Besides the backends this is the only module that touches ``torch.cuda``. ``torch`` is imported inside the
functions that need it, so the engine client (UI process) can import the policy objects and
``configure_allocator`` without loading torch (the UI must never initialise CUDA).
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import psutil

from voicelab.engine import heap
from voicelab.engine.growth import GrowthWarning, GrowthWatch
from voicelab.engine.messages import AllocatorStats, CleanReport, MemoryBlock, MemorySegment, SegmentSnapshot
from voicelab.errors import BackendLoadError, DeviceOutOfMemoryError

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

T = TypeVar("T")

ALLOC_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
DEFAULT_ALLOC_CONF = "expandable_segments:True"


def _cuda_device(device: str) -> torch.device | None:
    """The torch device for a CUDA device string with CUDA present, else ``None`` (CPU and friends)."""
    import torch

    parsed = torch.device(device)
    if parsed.type != "cuda" or not torch.cuda.is_available():
        return None
    if parsed.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return parsed


def use_device_in_this_thread(device: str) -> None:
    """The current CUDA device is per thread: a job thread must name the worker's, or its work goes to cuda:0."""
    import torch

    cuda = _cuda_device(device)
    if cuda is not None:
        torch.cuda.set_device(cuda)


def resolve_device(requested: str) -> str:
    """The worker's device from the setting (auto, cpu, cuda[:N]); one sentence where it does not exist."""
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise BackendLoadError("CUDA was requested but no NVIDIA GPU is available to PyTorch; use --device cpu.")
    if requested != "cpu" and not requested.startswith("cuda"):
        raise BackendLoadError(f"Unknown device '{requested}'; use auto, cpu or cuda.")
    index = requested.partition(":")[2]
    if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
        raise BackendLoadError(f"There is no device {requested}; this machine has {torch.cuda.device_count()} GPU(s).")
    return requested


def _worker_rss() -> tuple[int, int]:
    process = psutil.Process(os.getpid())
    return process.pid, int(process.memory_info().rss)


@dataclass(frozen=True)
class AllocatorCounters:
    """Cumulative allocator event counts since the worker started (the basis for per-sample deltas)."""

    alloc_retries: int = 0
    ooms: int = 0


def read_allocator(device: str, previous: AllocatorCounters | None = None) -> tuple[AllocatorStats, AllocatorCounters]:
    """Read the allocator once; retries/OOMs in the stats are deltas against ``previous`` cumulative counters.

    Returns the stats and the cumulative counters to pass next time. One ``memory_stats`` call feeds both,
    so no event is lost or double-counted between two reads.
    """
    if previous is not None and not isinstance(previous, AllocatorCounters):
        raise TypeError(
            "previous must be the AllocatorCounters returned by read_allocator (AllocatorStats holds deltas, "
            "not totals); use AllocatorMonitor for a stream of samples"
        )
    pid, rss = _worker_rss()
    cuda = _cuda_device(device)
    if cuda is None:
        return AllocatorStats(device=device, worker_pid=pid, worker_rss=rss), previous or AllocatorCounters()
    import torch

    raw: dict[str, Any] = torch.cuda.memory_stats(cuda)
    counters = AllocatorCounters(int(raw.get("num_alloc_retries", 0)), int(raw.get("num_ooms", 0)))
    base = previous or AllocatorCounters()
    stats = AllocatorStats(
        device=str(cuda),
        allocated=int(raw.get("allocated_bytes.all.current", 0)),
        reserved=int(raw.get("reserved_bytes.all.current", 0)),
        non_releasable=int(raw.get("inactive_split_bytes.all.current", 0)),
        peak_allocated=int(raw.get("allocated_bytes.all.peak", 0)),
        alloc_retries=max(counters.alloc_retries - base.alloc_retries, 0),
        ooms=max(counters.ooms - base.ooms, 0),
        worker_pid=pid,
        worker_rss=rss,
    )
    return stats, counters


def allocator_stats(device: str, previous: AllocatorCounters | None = None) -> AllocatorStats:
    """Allocator figures for ``device`` (zeros on CPU, real worker pid/RSS everywhere).

    Without ``previous`` the retry/OOM figures count from worker start. For a steady stream of deltas use
    ``AllocatorMonitor``, which remembers the counters between samples.
    """
    return read_allocator(device, previous)[0]


class AllocatorMonitor:
    """Produces ``AllocatorStats`` whose retry/OOM figures are deltas since this monitor's previous sample.

    Thread-safe. Give each consumer its own monitor (one for the heartbeat, one for between-job hygiene):
    a monitor's deltas are "since *its* previous sample", so a shared one would let the heartbeat swallow
    the retry that the hygiene policy should react to.
    """

    def __init__(self, device: str) -> None:
        self.device = device
        self._lock = threading.Lock()
        self._counters: AllocatorCounters | None = None

    def sample(self) -> AllocatorStats:
        with self._lock:
            stats, self._counters = read_allocator(self.device, self._counters)
            return stats


def device_total(device: str) -> int:
    """Total memory of a CUDA device in bytes; 0 on CPU (policies then ignore device shares)."""
    cuda = _cuda_device(device)
    if cuda is None:
        return 0
    import torch

    return int(torch.cuda.get_device_properties(cuda).total_memory)


def reset_peak(device: str) -> None:
    """Start a new peak-allocated window (call before each job to get the job's own peak)."""
    cuda = _cuda_device(device)
    if cuda is not None:
        import torch

        torch.cuda.reset_peak_memory_stats(cuda)


def segment_snapshot(device: str) -> SegmentSnapshot:
    """The allocator's segment map for ``device``; no segments on CPU. Costly: call on demand, not per second."""
    cuda = _cuda_device(device)
    if cuda is None:
        return SegmentSnapshot(device=device, segments=())
    import torch

    take_snapshot: Callable[..., list[dict[str, Any]]] = torch.cuda.memory_snapshot  # untyped upstream
    raw_segments = take_snapshot()  # traces are only recorded when memory history is on; none by default
    segments = tuple(
        MemorySegment(
            address=int(seg["address"]),
            total_size=int(seg["total_size"]),
            segment_type=str(seg.get("segment_type", "large")),
            blocks=tuple(MemoryBlock(size=int(b["size"]), state=str(b["state"])) for b in seg.get("blocks", ())),
        )
        for seg in raw_segments
        if int(seg.get("device", cuda.index)) == cuda.index
    )
    return SegmentSnapshot(device=str(cuda), segments=tuple(sorted(segments, key=lambda s: s.address)))


CUFFT_PLAN_CACHE_SIZE = 4096  # torch's default: ~55 MiB of host memory when full (300 plans held ~4 MiB)


def cap_plan_cache(device: str, plans: int = CUFFT_PLAN_CACHE_SIZE) -> None:
    """Bound cuFFT's plan cache (one plan per signal length: the speaker encoder, pitch tracker, voice renderer,
    CosyVoice's vocoder and prompt features). A small cap costs host memory instead of saving it: every new length
    evicts a plan and builds another, and the worker's RSS grew with the churn. On the H200 (2026-12-01, side by
    side): the managed Piper soak grew +107 MiB over 1,000 requests with a cap of 32 and +45 MiB with 4,096, and
    CosyVoice2 grew 2.0 MiB per call with new text lengths against 0.26 repeating one request, while upstream's
    own process (torch's default) stayed flat. So the bound is torch's own 4,096, set here so that it is explicit.
    """
    import torch

    cuda = _cuda_device(device)
    if cuda is not None:
        torch.backends.cuda.cufft_plan_cache[cuda.index].max_size = plans


def _clear_cuda_caches(cuda: torch.device, libraries: bool = True) -> list[str]:
    """Release library caches first (their memory returns to the allocator), then the allocator's cache;
    without ``libraries`` (the automatic clean) only the allocator's."""
    import torch

    cleared: list[str] = []
    torch.cuda.synchronize(cuda)
    cleared.append("synchronised the device")
    if libraries:
        torch.backends.cuda.cufft_plan_cache[cuda.index].clear()
        cleared.append("cuFFT plan cache")
        clear_cublas: Callable[[], None] | None = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear_cublas is not None:
            clear_cublas()
            cleared.append("cuBLAS workspaces")
    torch.cuda.empty_cache()
    cleared.append("CUDA cached blocks (empty_cache)")
    return cleared


def clean_device_cache(
    device: str, extra_cleanups: Sequence[tuple[str, Callable[[], object]]] = (), thorough: bool = True
) -> CleanReport:
    """Free what can be freed between jobs and report before → after.

    ``extra_cleanups`` run first (e.g. ("speaker profiles", cache.clear)) so the tensors they drop are
    collectable when the allocator's cache is emptied. On CPU only the Python-side steps apply. Not
    ``thorough`` (the automatic clean between jobs): a young-generation collection instead of a full one, and
    no heap trim (the worker trims after every job anyway) and no library caches, so it costs milliseconds.
    """
    started = time.perf_counter()
    before = allocator_stats(device)
    cleared: list[str] = []
    for name, cleanup in extra_cleanups:
        cleanup()
        cleared.append(name)
    collected = gc.collect() if thorough else gc.collect(1)
    cleared.append(f"Python garbage ({collected} objects{'' if thorough else ', young generations'})")
    if thorough:
        returned = heap.trim_heap(collect=False)
        cleared.append(f"freed host heap returned to the OS ({returned / 2**20:.0f} MiB)")
    cuda = _cuda_device(device)
    if cuda is not None:
        cleared.extend(_clear_cuda_caches(cuda, libraries=thorough))
    after = allocator_stats(device)
    report = CleanReport(before=before, after=after, cleared=tuple(cleared), duration_s=time.perf_counter() - started)
    logger.info(
        "cleaned %s: reserved %d → %d bytes, allocated %d → %d bytes (%s)",
        device,
        before.reserved,
        after.reserved,
        before.allocated,
        after.allocated,
        ", ".join(cleared),
    )
    return report


def configure_allocator(environ: MutableMapping[str, str]) -> str:
    """Turn on expandable segments unless the user chose their own allocator settings; return the effective value.

    Must run before CUDA is initialised in the process that will use it (the worker, or the parent before it
    spawns the worker): the caching allocator reads its settings once.
    """
    for name in ALLOC_CONF_VARS:
        value = environ.get(name, "").strip()
        if value:
            logger.info("keeping the user's allocator settings %s=%s", name, value)
            return value
    environ["PYTORCH_CUDA_ALLOC_CONF"] = DEFAULT_ALLOC_CONF
    return DEFAULT_ALLOC_CONF


@dataclass(frozen=True)
class HygienePolicy:
    """When to clean the allocator cache between jobs (cleaning after every job costs latency: docs/ARCHITECTURE.md).

    cached_share: clean when cached-but-free memory exceeds this share of the device's total memory.
    cached_bytes: ... or exceeds this many bytes (on a 141 GB H200 a share is never reached: CosyVoice kept the
    ~2.7 GiB its longest requests had needed cached for good, 1.47x upstream's reserved memory, 2026-12-01). 768 MiB:
    at 1 GiB the clean never fired over 200 CosyVoice requests (its cache settled at ~900 MiB over 3.6 GiB
    allocated, 4 MiB above upstream's peak reserved, 2026-12-02); below that, each long request's cache is
    returned after it instead of kept.
    fragmentation: clean when non-releasable ÷ cached free exceeds this and at least ``min_cached_bytes`` is cached.
    """

    enabled: bool = True
    cached_share: float = 0.25
    cached_bytes: int = 768 * 1024**2
    fragmentation: float = 0.5
    min_cached_bytes: int = 256 * 1024**2

    def __post_init__(self) -> None:
        if not 0.0 < self.cached_share <= 1.0:
            raise ValueError(f"cached_share must be in (0, 1], got {self.cached_share}")
        if not 0.0 < self.fragmentation <= 1.0:
            raise ValueError(f"fragmentation must be in (0, 1], got {self.fragmentation}")
        if self.min_cached_bytes < 0 or self.cached_bytes <= 0:
            raise ValueError(f"min_cached_bytes must be >= 0 and cached_bytes > 0, got {self}")

    def should_clean(
        self, stats: AllocatorStats, device_total: int, last_clean: AllocatorStats | None = None
    ) -> str | None:
        """The reason to clean now, or ``None`` to leave the cache alone.

        ``last_clean``: the allocator as the previous automatic clean left it. What that clean could not release
        (split blocks of segments still in use, CUDA graph pools) does not call for another until the cached
        memory has grown by ``min_cached_bytes`` since: on the H200, CosyVoice left ~74 % of its ~270 MiB cache
        split after every request, and the clean that followed each one freed ~100 MiB and cost ~0.5 s before
        the next job.
        """
        if not self.enabled:
            return None
        if stats.ooms > 0:
            return f"the allocator hit {stats.ooms} out-of-memory error(s) since the last check"
        if stats.alloc_retries > 0:
            return f"the allocator had to free its cache and retry {stats.alloc_retries} time(s)"
        cached = stats.cached_free
        if device_total > 0 and cached > self.cached_share * device_total:
            return f"cached free memory is {cached / device_total:.0%} of the device (limit {self.cached_share:.0%})"
        grown = last_clean is None or cached - last_clean.cached_free >= self.min_cached_bytes
        if cached > self.cached_bytes and grown:
            return f"cached free memory is {cached / 2**20:.0f} MiB (limit {self.cached_bytes / 2**20:.0f} MiB)"
        if cached >= self.min_cached_bytes and stats.fragmentation > self.fragmentation and grown:
            return f"fragmentation is {stats.fragmentation:.0%} (limit {self.fragmentation:.0%})"
        return None


@dataclass(frozen=True)
class LeakWarning(GrowthWarning):
    """Allocated memory after a job stayed above the post-warm-up baseline by more than the bound."""

    @property
    def message(self) -> str:
        mib = 1024**2
        return (
            f"GPU memory held between jobs grew by {self.growth_bytes / mib:.0f} MiB over {self.jobs_observed} jobs "
            f"(more than the {self.bound_bytes / mib:.0f} MiB allowed); a soft restart of the engine will release it."
        )


class LeakWatch(GrowthWatch):
    """Watches allocated memory after each job for steady growth (a leak): a warning once per excursion."""

    def __init__(self, bound_bytes: int, warmup_jobs: int = 3) -> None:
        super().__init__(bound_bytes, warmup_jobs)

    def observe(self, stats: AllocatorStats, holders: int | None = None) -> LeakWarning | None:
        """Record the allocated figure after a job; a ``LeakWarning`` the first time growth exceeds the bound
        (``holders``: threads, loaded models and graphs, see ``GrowthWatch``)."""
        if not self.over(stats.allocated, holders):
            return None
        assert self.baseline is not None
        warning = LeakWarning(self.baseline, stats.allocated, self.bound_bytes, self.jobs_observed)
        logger.warning("%s", warning.message)
        return warning


def run_with_oom_retry(
    fn_full: Callable[[], T],
    fn_pieces: Callable[[], T],
    clean: Callable[[], object],
    on_retry: Callable[[str], None] | None = None,
) -> T:
    """Run ``fn_full``; on a CUDA OOM clean the cache and run ``fn_pieces`` once, else raise DeviceOutOfMemoryError.

    Cleaning happens outside the ``except`` block: the exception's traceback holds the frames (and tensors)
    of the failed attempt, and the memory is only freed once it is gone.
    """
    import torch

    try:
        return fn_full()
    except torch.OutOfMemoryError as err:
        first_error = str(err).splitlines()[0] if str(err) else "out of memory"
    logger.warning("out of memory (%s); cleaning the cache and retrying in smaller pieces", first_error)
    clean()
    if on_retry is not None:
        on_retry(first_error)
    try:
        return fn_pieces()
    except torch.OutOfMemoryError as err:
        second_error = str(err).splitlines()[0] if str(err) else "out of memory"
    logger.error("out of memory again in smaller pieces (%s)", second_error)
    clean()
    raise DeviceOutOfMemoryError()
