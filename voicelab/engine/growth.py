"""Growth over a post-warm-up baseline: the one mechanism behind the GPU leak watch and the host RSS watch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GrowthWarning:
    """A figure stayed above its post-warm-up baseline by more than the bound (the watches' subclasses word it)."""

    baseline_bytes: int
    current_bytes: int
    bound_bytes: int
    jobs_observed: int

    @property
    def growth_bytes(self) -> int:
        return self.current_bytes - self.baseline_bytes


class GrowthWatch:
    """Reads one figure after each job, ignoring the warm-up jobs.

    The baseline is the figure after the ``warmup_jobs``-th job. An excursion starts when the figure rises more
    than ``bound_bytes`` above it and ends (re-arming) when it falls back under the bound.

    ``holders`` (where the caller gives it): how many holders of one-time state the process has at the reading --
    live threads, models loaded on first use, CUDA graphs captured. A reading with more holders than any before
    moves the baseline up to it. Each new worker thread brings state of its own that stays with the thread, not a
    leak: a cuBLAS workspace on the device (32 MiB on Hopper, in *allocated* memory; 16 clients at once held 1.2 GiB
    more on the H200, 2026-12-02) and cuDNN's plan cache and a malloc arena on the host. A model loaded on first use
    brings its weights and, on a GPU, the CUDA kernels its first call loads into the host (the first cloned job of
    ``bench throughput --clone``, the 63rd after 62 plain ones, loaded both speaker encoders and the matcher: RSS
    1719 -> 2091 MiB on the H200, 2026-12-02). Threads are reused and models loaded once, so this happens at most
    once per holder; growth between such readings still warns.
    """

    def __init__(self, bound_bytes: int, warmup_jobs: int) -> None:
        if bound_bytes <= 0:
            raise ValueError(f"bound_bytes must be positive, got {bound_bytes}")
        if warmup_jobs < 1:
            raise ValueError(f"warmup_jobs must be at least 1, got {warmup_jobs}")
        self.bound_bytes = bound_bytes
        self.warmup_jobs = warmup_jobs
        self.jobs_observed = 0
        self.baseline: int | None = None
        self.most_holders = 0
        self._above = False

    def over(self, value: int, holders: int | None = None) -> bool | None:
        """None: warming up or within the bound; True: the first reading of an excursion; False: still above."""
        self.jobs_observed += 1
        more_holders = holders is not None and holders > self.most_holders
        self.most_holders = max(self.most_holders, holders or 0)
        if self.jobs_observed < self.warmup_jobs:
            return None
        if self.baseline is None:
            self.baseline = value
            return None
        if more_holders:
            self.baseline = max(self.baseline, value)
        if value - self.baseline <= self.bound_bytes:
            self._above = False
            return None
        first = not self._above
        self._above = True
        return first

    def reset(self) -> None:
        """Forget the baseline (after a worker restart the new process warms up again)."""
        self.jobs_observed = 0
        self.baseline = None
        self.most_holders = 0
        self._above = False
