"""Worker-side host heap hygiene: glibc's arenas, freed heap handed back to the OS, and a watch on RSS.

Measured in docs/host-memory.md: on CPU the worker's RSS grew with every new text length and never came back,
because freed decoder activations stayed in glibc's heap (and in one heap per thread). ``configure_heap`` caps
the arenas; ``trim_heap`` returns the free pages after each job and on Clean cache; ``RssWatch`` warns when
RSS after a job stays above its post-warm-up baseline. Torch-free, so the UI process may import it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

import psutil

from voicelab.engine.growth import GrowthWarning, GrowthWatch

logger = logging.getLogger(__name__)

MiB = 2**20
M_ARENA_MAX = -8  # from glibc's malloc.h


@dataclass(frozen=True)
class HeapPolicy:
    """How the worker's host heap is kept in check.

    arena_max: glibc malloc arenas (``MALLOC_ARENA_MAX``); 0 keeps glibc's default of 8 per core.
    trim_after_job: hand freed heap back to the OS (``malloc_trim``) after a job, not only on Clean cache, once
    glibc holds more than ``trim_above`` bytes free (a trim costs tens of ms; the pages fault back in next job).
    onednn_cache: oneDNN's primitive cache capacity (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``); 0 keeps its default
    of 1,024 primitives, which held ~130 MiB more RSS on CPU than 64 for no measurable speed (docs/host-memory.md).
    cudnn_plans: PyTorch's cache of cuDNN execution plans, one per convolution shape
    (``TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT``); 0 keeps its default of 10,000 plans, which PyTorch puts at ~2 GiB of
    host memory (~200 KiB a plan). A vocoder run eagerly on new lengths adds plans with nearly every request (HiFT:
    ~60 convolution shapes a call). 1,024 holds 27-200 MiB (CosyVoice's growth per new length suggests ~27 KiB a
    plan) and still keeps every shape that recurs (the streamed chunks' few sizes, ~60 plans each) among the most
    recent, so no recurring call plans again; a cap near one request's own count would.
    """

    arena_max: int = 2
    trim_after_job: bool = True
    trim_above: int = 32 * MiB
    onednn_cache: int = 64
    cudnn_plans: int = 1024

    def __post_init__(self) -> None:
        if min(self.arena_max, self.onednn_cache, self.cudnn_plans) < 0:
            raise ValueError("arena_max, onednn_cache and cudnn_plans must be >= 0 (0 keeps the library's default)")


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def configure_heap(policy: HeapPolicy, environ: Mapping[str, str]) -> list[str]:
    """Apply ``policy`` to this process's heap; call before the model loads and torch starts its threads.

    ``mallopt(M_ARENA_MAX)`` takes effect for arenas created afterwards, so no environment variable (read by
    glibc only at process start) is needed. A user's own ``MALLOC_ARENA_MAX`` in ``environ`` wins. oneDNN reads
    its cache capacity when it first builds a primitive and PyTorch its cuDNN plan limit at the first cuDNN
    convolution, so those two go through the environment (a user's own value wins there too).
    """
    applied: list[str] = []
    caps = {
        "ONEDNN_PRIMITIVE_CACHE_CAPACITY": policy.onednn_cache,
        "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT": policy.cudnn_plans,
    }
    for name, cap in caps.items():
        if cap and not environ.get(name):
            os.environ[name] = str(cap)
            applied.append(f"{name}={cap}")
    mallopt = getattr(_libc(), "mallopt", None)
    user_set = bool(environ.get("MALLOC_ARENA_MAX"))
    if policy.arena_max and not user_set and mallopt is not None and mallopt(M_ARENA_MAX, policy.arena_max):
        applied.append(f"glibc arenas capped at {policy.arena_max}")
    return applied


def process_rss() -> int:
    """This process's resident set size in bytes."""
    return int(psutil.Process(os.getpid()).memory_info().rss)


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def _mallinfo2() -> _MallInfo2 | None:
    mallinfo2 = getattr(_libc(), "mallinfo2", None)
    if mallinfo2 is None:
        return None
    mallinfo2.restype = _MallInfo2
    return mallinfo2()  # type: ignore[no-any-return]


def free_heap_bytes() -> int | None:
    """Bytes glibc holds free in its heaps (``mallinfo2().fordblks``, all arenas); None without glibc 2.33+."""
    info = _mallinfo2()
    return None if info is None else int(info.fordblks)


def malloc_in_use() -> int | None:
    """Bytes malloc has handed out and not had back (heap chunks + mmapped chunks); None without glibc 2.33+."""
    info = _mallinfo2()
    return None if info is None else int(info.uordblks + info.hblkhd)


def trim_heap(collect: bool = True) -> int:
    """Return glibc's free heap pages to the OS (after a garbage collection if ``collect``); the RSS given back.

    ``malloc_trim(0)`` releases free memory at the top of every arena and the whole free pages inside them.
    Where libc has no ``malloc_trim`` (musl, or another allocator preloaded) only the collection runs. A full
    ``gc.collect()`` walks every Python object (0.2-0.8 s on a busy 2-core box), so jobs trim without it.
    """
    before = process_rss()
    if collect:
        gc.collect()
    malloc_trim = getattr(_libc(), "malloc_trim", None)
    if malloc_trim is not None:
        malloc_trim(0)
    return max(before - process_rss(), 0)


def trim_after_job(policy: HeapPolicy) -> int:
    """The between-job trim: only when the policy asks and glibc holds more than ``trim_above`` free."""
    if not policy.trim_after_job:
        return 0
    free = free_heap_bytes()
    if free is not None and free < policy.trim_above:
        return 0
    return trim_heap(collect=False)


@dataclass(frozen=True)
class RssWarning(GrowthWarning):
    """The worker's RSS after a job stayed above its post-warm-up baseline by more than the bound."""

    @property
    def message(self) -> str:
        return (
            f"Worker host memory (RSS) grew from {self.baseline_bytes / MiB:.0f} to {self.current_bytes / MiB:.0f} MiB "
            f"(+{self.growth_bytes / MiB:.0f} MiB, more than the {self.bound_bytes / MiB:.0f} MiB allowed) over "
            f"{self.jobs_observed} jobs; Clean cache or a soft restart will release it."
        )


class RssWatch(GrowthWatch):
    """Watches the worker's RSS after each (trimmed) job, ignoring the warm-up jobs.

    A warning is logged once per excursion above ``baseline + bound_bytes``; ``current`` stays set until RSS is
    back under the bound.
    """

    def __init__(self, bound_bytes: int, warmup_jobs: int = 5) -> None:
        super().__init__(bound_bytes, warmup_jobs)
        self.current: RssWarning | None = None

    def observe(self, rss: int, holders: int | None = None) -> RssWarning | None:
        """Record RSS after a job; the warning while RSS is above the bound (logged once per excursion;
        ``holders``: threads, loaded models and graphs, see ``GrowthWatch``)."""
        first = self.over(rss, holders)
        if first is None:
            self.current = None
            return None
        assert self.baseline is not None
        self.current = RssWarning(self.baseline, rss, self.bound_bytes, self.jobs_observed)
        if first:
            logger.warning("%s", self.current.message)
        return self.current

    def reset(self) -> None:
        super().reset()
        self.current = None
