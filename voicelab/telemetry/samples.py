"""What one telemetry sample holds (docs/ARCHITECTURE.md, "Telemetry"); frozen so the panel can share them."""

from __future__ import annotations

from dataclasses import dataclass

from voicelab.engine.messages import AllocatorStats


@dataclass(frozen=True)
class ProcessGpuMemory:
    """GPU memory NVML attributes to one process; ``used`` is ``None`` where the driver cannot tell."""

    pid: int
    used: int | None


@dataclass(frozen=True)
class NvmlFigures:
    """Device-level figures from NVML. ``None`` fields are not supported by this GPU or driver.

    ``reserved`` is memory the driver/firmware keeps for itself (NVML memory info v2), not PyTorch's reserve.
    """

    name: str
    index: int
    total: int
    used: int
    free: int
    reserved: int | None = None
    utilisation_pct: float | None = None
    memory_utilisation_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    processes: tuple[ProcessGpuMemory, ...] = ()

    def used_by(self, pid: int | None) -> int | None:
        """GPU memory NVML attributes to ``pid`` (``None`` if unknown or not listed)."""
        if pid is None:
            return None
        return next((p.used for p in self.processes if p.pid == pid), None)


@dataclass(frozen=True)
class HostFigures:
    """Host memory and CPU. ``worker_rss`` is ``None`` while no worker process is running."""

    ui_pid: int
    ui_rss: int
    worker_pid: int | None
    worker_rss: int | None
    ram_used: int
    ram_total: int
    cpu_pct: float


@dataclass(frozen=True)
class EngineState:
    """What the engine client reports without blocking: queue length, job on the device, worker pid."""

    queue_length: int = 0
    job_in_flight: str | None = None
    worker_pid: int | None = None


@dataclass(frozen=True)
class MemorySample:
    """One row of the resource timeline: NVML, the latest allocator figures from the worker, and the host.

    ``nvml`` is ``None`` without an NVIDIA GPU (``nvml_note`` then says why); ``allocator`` is ``None`` until
    the worker has reported (or when its last report came from a worker that has since been replaced).
    """

    timestamp: float
    nvml: NvmlFigures | None
    allocator: AllocatorStats | None
    host: HostFigures
    queue_length: int = 0
    job_in_flight: str | None = None
    nvml_note: str | None = None

    @property
    def worker_gpu_used(self) -> int | None:
        """GPU memory NVML attributes to the worker process."""
        if self.nvml is None:
            return None
        return self.nvml.used_by(self.host.worker_pid)

    @property
    def outside_pytorch(self) -> int | None:
        """NVML used by the worker - torch reserved: CUDA context, cuBLAS/cuFFT workspaces, other libraries."""
        used = self.worker_gpu_used
        if used is None or self.allocator is None:
            return None
        return max(used - self.allocator.reserved, 0)

    @property
    def allocator_age_s(self) -> float | None:
        """Seconds since the worker's allocator figures were taken (large while the worker is stuck)."""
        if self.allocator is None:
            return None
        return max(self.timestamp - self.allocator.timestamp, 0.0)


@dataclass(frozen=True)
class JobMarker:
    """A finished job on the timeline."""

    timestamp: float
    job_id: str
    latency_s: float
