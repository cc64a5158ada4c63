"""Device figures from NVML (nvidia-ml-py, import name ``pynvml``) in the UI process.

NVML reads the driver's view without creating a CUDA context, so the UI holds no GPU memory of its own.
It never imports torch. A machine without NVML gives ``available=False`` and a one-line reason, never an error.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from types import ModuleType, TracebackType
from typing import Any, Self, TypeVar

from voicelab.telemetry.samples import NvmlFigures, ProcessGpuMemory

logger = logging.getLogger(__name__)

NO_GPU = "no NVIDIA GPU"

T = TypeVar("T")


def _load_pynvml() -> tuple[ModuleType | None, str | None]:
    try:
        import pynvml
    except ImportError:
        return None, f"{NO_GPU} (nvidia-ml-py is not installed)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        logger.info("NVML unavailable: %s", err)
        return None, NO_GPU
    return pynvml, None


class NvmlSampler:
    """Reads one GPU through NVML. ``available`` is False (and ``reason`` says why) when there is none."""

    def __init__(self, device_index: int = 0) -> None:
        self.device_index = device_index
        self._lock = threading.Lock()
        self._nvml, self.reason = _load_pynvml()
        self._handle: Any = None
        self.name = ""
        if self._nvml is None:
            return
        nvml = self._nvml
        try:
            count = int(nvml.nvmlDeviceGetCount())
            if device_index >= count:
                self._close(f"{NO_GPU} at index {device_index} ({count} found)")
                return
            self._handle = nvml.nvmlDeviceGetHandleByIndex(device_index)
            name = nvml.nvmlDeviceGetName(self._handle)
            self.name = name.decode() if isinstance(name, bytes) else str(name)
        except nvml.NVMLError as err:
            self._close(f"{NO_GPU} (NVML: {err})")

    @property
    def available(self) -> bool:
        return self._handle is not None

    def _close(self, reason: str | None) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as err:
                logger.debug("nvmlShutdown failed: %s", err)
        self._nvml = None
        self._handle = None
        self.reason = reason

    def close(self) -> None:
        """Release NVML (idempotent)."""
        with self._lock:
            if self._nvml is not None:
                self._close(self.reason or "closed")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _optional(self, read: Callable[[], T]) -> T | None:
        """One figure this GPU may not support (power on some boards, temperature in some VMs)."""
        assert self._nvml is not None
        try:
            return read()
        except self._nvml.NVMLError:
            return None

    def _memory(self) -> tuple[int, int, int, int | None]:
        """total, used, free, reserved; info v2 (with the driver's reserve) where the driver has it."""
        nvml, handle = self._nvml, self._handle
        assert nvml is not None
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None:
            try:
                info = nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
                return int(info.total), int(info.used), int(info.free), int(info.reserved)
            except nvml.NVMLError as err:
                logger.debug("nvmlDeviceGetMemoryInfo_v2 unavailable (%s); using v1", err)
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
        return int(info.total), int(info.used), int(info.free), None

    def _processes(self, pids: Sequence[int]) -> tuple[ProcessGpuMemory, ...]:
        """Per-process GPU memory for ``pids`` (processes in another pid namespace do not show up)."""
        nvml = self._nvml
        assert nvml is not None
        if not pids:
            return ()
        running = self._optional(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)) or []
        used = {int(p.pid): (None if p.usedGpuMemory is None else int(p.usedGpuMemory)) for p in running}
        return tuple(ProcessGpuMemory(pid=pid, used=used[pid]) for pid in pids if pid in used)

    def sample(self, pids: Sequence[int] = ()) -> NvmlFigures | None:
        """Current figures, or ``None`` without a GPU or if the GPU stopped answering (``reason`` says why)."""
        with self._lock:
            if self._nvml is None or self._handle is None:
                return None
            nvml, handle = self._nvml, self._handle
            try:
                total, used, free, reserved = self._memory()
            except nvml.NVMLError as err:
                logger.warning("NVML stopped answering: %s", err)
                self._close(f"the NVIDIA GPU stopped answering ({err})")
                return None
            rates = self._optional(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
            power_mw = self._optional(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
            limit_mw = self._optional(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
            temperature = self._optional(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
            return NvmlFigures(
                name=self.name,
                index=self.device_index,
                total=total,
                used=used,
                free=free,
                reserved=reserved,
                utilisation_pct=None if rates is None else float(rates.gpu),
                memory_utilisation_pct=None if rates is None else float(rates.memory),
                temperature_c=None if temperature is None else float(temperature),
                power_w=None if power_mw is None else power_mw / 1000.0,
                power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
                processes=self._processes(pids),
            )
