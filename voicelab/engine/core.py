"""EngineCore: the model side of the engine, usable in one process (tests drive it directly).

The process wrapper (proc.py) adds spawn, the READY handshake and pipes around it.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import torch

from voicelab.backends.base import VitsControls
from voicelab.backends.registry import create_backend
from voicelab.engine import memory
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
from voicelab.engine.pipeline import synthesize_text
from voicelab.engine.validation import check_control, clean_text
from voicelab.engine.voicing import VoiceStage
from voicelab.errors import BackendLoadError, InvalidSettingError
from voicelab.instruct.render import style_adjust
from voicelab.settings import Settings

log = logging.getLogger(__name__)

WARMUP_TEXT = "Warming up."
CALIBRATION_TEXT = "The quick brown fox jumps over the lazy dog, then rests a while in the warm afternoon sun."
DTYPES = ("float32", "bfloat16", "float16")
SEED_RANGE = (-(2**63), 2**64)  # what torch.Generator.manual_seed accepts


def resolve_device(requested: str) -> str:
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise BackendLoadError("CUDA was requested but no NVIDIA GPU is available to PyTorch; use --device cpu.")
    if requested != "cpu" and not requested.startswith("cuda"):
        raise BackendLoadError(f"Unknown device '{requested}'; use auto, cpu or cuda.")
    return requested


class EngineCore:
    """Loads one backend on one device and runs requests one at a time, under inference mode."""

    # Every model call runs under this; the soak benchmark's naive mode swaps it to show what it saves.
    grad_mode: Callable[[], AbstractContextManager[Any]] = torch.inference_mode

    def __init__(self, settings: Settings) -> None:
        if settings.dtype not in DTYPES:
            raise BackendLoadError(f"Unknown dtype '{settings.dtype}'; use one of {', '.join(DTYPES)}.")
        self.settings = settings
        self.device = resolve_device(settings.device)
        self.dtype = settings.dtype if self.device != "cpu" or settings.dtype == "float32" else "float32"
        if settings.torch_threads > 0:
            torch.set_num_threads(settings.torch_threads)
        started = time.perf_counter()
        self.backend = create_backend(settings.backend, settings.voice_path)
        self.backend.load(self.device, self.dtype)
        self._heartbeat_monitor = memory.AllocatorMonitor(self.device)
        self._job_monitor = memory.AllocatorMonitor(self.device)
        self.voice = VoiceStage(self.device, settings.profile_cache_size)
        self._extra_cleanups: list[tuple[str, Callable[[], None]]] = [("speaker profiles", self.voice.clear_profiles)]
        self.warm_up()
        self.loaded = True
        self.load_s = time.perf_counter() - started
        self.leak_warning: str | None = None
        self.leak_watch = memory.LeakWatch(int(settings.leak_warn_mib * 2**20))
        self.hygiene = memory.HygienePolicy(
            enabled=settings.auto_clean,
            cached_share=settings.auto_clean_cached_share,
            fragmentation=settings.auto_clean_fragmentation,
        )

    def ready_message(self) -> WorkerReady:
        return WorkerReady(
            pid=os.getpid(),
            backend=self.backend.name,
            device=self.device,
            dtype=self.dtype,
            capabilities=self.backend.capabilities,
            load_s=self.load_s,
        )

    def warm_up(self) -> None:
        """One short synthesis so the first user request doesn't pay for lazy initialisation."""
        with self.grad_mode():
            synthesize_text(self.backend, WARMUP_TEXT, VitsControls(), 0.0, None)

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
        started = time.perf_counter()
        self._ensure_loaded()
        text = clean_text(request.text, self.settings.max_text_chars)
        for name in ("length_scale", "noise_scale", "noise_w", "sentence_silence_s"):
            check_control(name, getattr(request, name))
        if request.seed is not None and not SEED_RANGE[0] <= request.seed < SEED_RANGE[1]:
            raise InvalidSettingError("The seed must be a whole number between -2^63 and 2^64 - 1.")
        seed = request.seed if request.seed is not None else secrets.randbelow(2**31)
        adjust = style_adjust(request.style)
        base_scale = request.length_scale if request.length_scale is not None else self.backend.defaults.length_scale
        controls = VitsControls(
            None if base_scale is None else base_scale * adjust.length_scale_factor,
            request.noise_scale,
            request.noise_w,
        )
        memory.reset_peak(self.device)
        with self.grad_mode():
            draft = synthesize_text(
                self.backend,
                text,
                controls,
                request.sentence_silence_s,
                torch.Generator(device=self.device).manual_seed(seed),
                self._run_with_oom_retry,
            )
            profile = self.voice.profile_for(request.prompt, self._calibration) if request.prompt else None
            audio = self.voice.render(draft.audio, draft.sample_rate, profile, adjust)
            scores = self.voice.scores(draft.audio, audio, draft.sample_rate, profile) if profile else None
        return SynthesisResult(
            job_id=request.job_id,
            audio=np.clip(audio, -1.0, 1.0).astype(np.float32),
            sample_rate=draft.sample_rate,
            latency_s=time.perf_counter() - started,
            backend=self.backend.name,
            device=self.device,
            dtype=self.dtype,
            peak_allocated_bytes=memory.allocator_stats(self.device).peak_allocated,
            similarity=scores.similarity if scores else None,
            similarity_base=scores.similarity_base if scores else None,
            f0_prompt_hz=scores.f0_prompt_hz if scores else None,
            f0_output_hz=scores.f0_output_hz if scores else None,
            style=request.style,
            seed=seed,
            notices=request.prompt.notices if request.prompt else (),
            profile_cache=self.voice.cache_stats(),
        )

    def _calibration(self) -> tuple[np.ndarray, int]:
        """The backend voice on a fixed sentence, for the matcher's once-per-profile search."""
        draft = synthesize_text(
            self.backend, CALIBRATION_TEXT, VitsControls(), 0.0, torch.Generator(device=self.device).manual_seed(0)
        )
        return draft.audio, draft.sample_rate

    def _run_with_oom_retry(
        self, full: Callable[[], list[np.ndarray]], pieces: Callable[[], list[np.ndarray]]
    ) -> list[np.ndarray]:
        return memory.run_with_oom_retry(full, pieces, lambda: self.clean_cache(False))

    def stats(self) -> AllocatorStats:
        """For the heartbeat and control requests; job-side hygiene uses its own monitor so no delta is lost."""
        return self._heartbeat_monitor.sample()

    def clean_cache(self, clear_profiles: bool) -> CleanReport:
        cleanups = [c for c in self._extra_cleanups if clear_profiles or c[0] != "speaker profiles"]
        return memory.clean_device_cache(self.device, cleanups)

    def after_job(self) -> CleanReport | None:
        """Hygiene between jobs: clean when the policy says so; feed the leak watch."""
        stats = self._job_monitor.sample()
        warning = self.leak_watch.observe(stats)
        if warning is not None:
            self.leak_warning = warning.message
        reason = self.hygiene.should_clean(stats, memory.device_total(self.device))
        if reason is None:
            return None
        log.info("automatic clean: %s", reason)
        return self.clean_cache(False)

    def control(self, request: ControlRequest) -> CleanReport | SegmentSnapshot | AllocatorStats | None:
        handlers: dict[ControlKind, Callable[[], CleanReport | SegmentSnapshot | AllocatorStats | None]] = {
            ControlKind.CLEAN_CACHE: lambda: self.clean_cache(request.clear_profiles),
            ControlKind.SNAPSHOT: lambda: memory.segment_snapshot(self.device),
            ControlKind.STATS: self.stats,
            ControlKind.SHUTDOWN: lambda: None,
        }
        return handlers[request.kind]()

    def close(self) -> None:
        self.voice.unload()
        self.backend.unload()
        memory.clean_device_cache(self.device, ())
