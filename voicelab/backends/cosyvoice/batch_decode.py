"""Continuous batching of the speech-token LLM across requests: one decode step advances every active request.

Upstream decodes each request in its own ``llm_job`` thread, one kernel sequence per token per request, so two
requests take twice as long as one. ``DecodeBatcher`` owns a static cache of ``slots`` requests and one driver
thread: at every step boundary it prefills newly arrived requests into free slots, samples each active request's
next token by upstream's rules (``TokenRules``), retires those that stopped, reached ``max_len`` or were abandoned,
and advances the rest with one (graph-replayed) step over all slots. Each request samples from its own generator
(seeded from the default generator when it arrives), so a request's tokens do not depend on who it shares a step
with: a batch of requests equals each run alone.

With ``own_stream`` the driver works on a CUDA stream of its own, as upstream runs each ``llm_job`` under its own
LLM stream, and a request's prompt embedding, made on its caller's stream, is handed over with an event. Off by
default: on the H200 (2026-12-02) it saved no first-audio time once jobs ran on reused threads (in a long-lived
thread 0.235 s with it, 0.232 s without; the worker's slow first vocoder call (that day) was cuDNN replanning
in a new thread per job, not the shared stream), and it held ~90-110 MiB more reserved memory (4,680 against
4,592 MiB over the same 60 requests), since the caching allocator keeps each stream's freed blocks apart.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from voicelab.backends.cosyvoice.device_sampling import Readback, SlotSampler
from voicelab.backends.cosyvoice.kv_cache import QwenShape, StaticKvCache, decode_room
from voicelab.backends.cosyvoice.sampling import Row, TokenRules
from voicelab.backends.cosyvoice.step_graphs import StepRunner

log = logging.getLogger(__name__)
_END = object()


@dataclass
class _Request:
    lm_input: torch.Tensor
    min_len: int
    max_len: int
    generator: torch.Generator
    out: queue.Queue[Any] = field(default_factory=queue.Queue)
    decoded: list[int] = field(default_factory=list)
    logp: torch.Tensor | None = None
    length: int = 0
    abandoned: bool = False
    ready: torch.cuda.Event | None = None  # recorded on the caller's stream once ``lm_input`` is made (CUDA)


@dataclass(frozen=True)
class BatchConfig:
    """slots: requests decoded together at most (the cache holds ``slots`` x ``capacity`` positions).
    shrink_rows: see ``StepRunner`` (off: a batch equals each run alone, bit for bit).
    own_stream: on CUDA, the driver's steps on a stream of their own (off, the default: the default stream).
    kernels: see ``FastDecodeConfig``.
    sampling: "exact" (``TokenRules.sample_rows``: upstream's tokens for a seed) or "device" (``SlotSampler``: the
    same distribution drawn on the device, the next step launched before the host reads the tokens)."""

    slots: int = 8
    capacity: int = 2048
    graphs: bool = True
    mask_stops: bool = False
    shrink_rows: bool = False
    own_stream: bool = False
    kernels: str = "torch"
    sampling: str = "exact"


@dataclass
class CycleTimes:
    """The driver's cycles (sample every active row, step them) by row count: how long each took on the host's
    clock from sampling to the step's launch, which includes waiting for the previous step's device work. Set
    against the step's replay alone (``tools.cosyvoice_step_times``), it says whether a batch is bound by the device
    or by the host (Python, the GIL shared with the requests' own threads). Logged at DEBUG every ``every`` cycles."""

    every: int = 2000
    count: dict[int, int] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)

    def add(self, rows: int, seconds: float) -> None:
        self.count[rows] = self.count.get(rows, 0) + 1
        self.seconds[rows] = self.seconds.get(rows, 0.0) + seconds
        if sum(self.count.values()) >= self.every:
            log.debug("decode cycles, ms by rows: %s", self.line())
            self.count.clear()
            self.seconds.clear()

    def line(self) -> str:
        return ", ".join(
            f"{rows} rows {1000 * self.seconds[rows] / self.count[rows]:.2f} (x{self.count[rows]})"
            for rows in sorted(self.count)
        )


class DecodeBatcher:
    """Thread-safe: any number of threads call ``decode``; one driver thread runs the device work."""

    def __init__(self, llm: Any, config: BatchConfig) -> None:
        param = llm.llm_decoder.weight
        shape = QwenShape.of(llm.llm.model.config)
        cache = StaticKvCache(shape, config.slots, config.capacity, param.dtype, param.device)
        self.config, self.device = config, param.device
        self.rules = TokenRules.of(llm, config.mask_stops)
        self.runner = StepRunner(llm, cache, config.graphs, config.shrink_rows, config.kernels)
        self.pending: deque[_Request] = deque()
        self.active: dict[int, _Request] = {}
        self.wake = threading.Condition()
        self.closed = False
        self.seed_source: Callable[[], int | None] = lambda: None  # the calling request's seed (upstream.py sets it)
        self.cycles = CycleTimes()
        self.sampler = SlotSampler.beside(self.runner, self.rules, config.capacity) if (
            config.sampling == "device") else None  # fmt: skip
        self.readback = Readback(config.slots, param.device)
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" and config.own_stream else None
        self.driver = threading.Thread(target=self._drive, name="voicelab-llm-batch", daemon=True)
        self.driver.start()

    def room(self, lm_input: torch.Tensor, min_len: int, max_len: int) -> int | None:
        return decode_room(int(lm_input.shape[1]), min_len, max_len, self.config.capacity)

    def decode(self, lm_input: torch.Tensor, min_len: int, max_len: int, seed: int | None = None) -> Iterator[int]:
        """Upstream's token loop for one request, run in the shared batch; ``seed`` fixes its sampling (default:
        drawn from the default CPU generator, so ``torch.manual_seed`` before the call fixes it too)."""
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        generator = torch.Generator(device=self.device).manual_seed(seed)
        request = _Request(lm_input.detach(), min_len, max_len, generator)
        if self.stream is not None:
            request.ready = torch.cuda.Event()
            request.ready.record()  # on the calling thread's current stream, where lm_input was made
        with self.wake:
            self.pending.append(request)
            self.wake.notify()
        try:
            while (item := request.out.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            request.abandoned = True

    def close(self) -> None:
        with self.wake:
            self.closed = True
            self.wake.notify()
        self.driver.join(timeout=10)

    def _drive(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # this thread's kernels go to the model's GPU
        on_stream = torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()
        with torch.inference_mode(), on_stream:
            while self._wait():
                try:
                    self._admit()
                    self._advance()
                except Exception as exc:  # every waiting caller gets the error; none is left hanging
                    log.error("batched decode failed: %s: %s", type(exc).__name__, exc)
                    for request in [*self.active.values(), *self.pending]:
                        request.out.put(exc)
                        request.out.put(_END)
                    self.active.clear()
                    self.pending.clear()

    def _wait(self) -> bool:
        with self.wake:
            while not self.closed and not self.active and not self.pending:
                self.wake.wait()
            return not self.closed

    def _admit(self) -> None:
        """Prefill waiting requests into free slots (a step boundary: no step is in flight)."""
        free = [slot for slot in range(self.config.slots) if slot not in self.active]
        while free:
            with self.wake:
                if not self.pending:
                    return
                request = self.pending.popleft()
            if request.abandoned:
                continue
            slot = free.pop(0)
            if request.ready is not None and self.stream is not None:
                self.stream.wait_event(request.ready)  # the prompt embedding is complete before prefill reads it
                request.lm_input.record_stream(self.stream)  # its memory is not reused while this stream reads it
            request.length = int(request.lm_input.shape[1])
            request.logp = self.runner.prefill(request.lm_input.to(self.runner.logp.dtype), slot)
            if self.sampler is not None:
                self.runner.logp[slot].copy_(request.logp)  # where the device sampler reads every slot's scores
                self.sampler.admit(slot, request.generator, request.min_len, request.length)
            self.active[slot] = request

    def _advance(self) -> None:
        """Sample every active request's next token (all rows at once), retire finished ones, step the rest
        together."""
        for slot in [slot for slot, request in self.active.items() if self._done(request)]:
            self._retire(slot)
        if self.sampler is not None:
            self._advance_on_device(self.sampler)
            return
        live, start = list(self.active.items()), time.perf_counter()
        rows = [Row(request.decoded, request.min_len, request.generator) for _, request in live]
        logps = [request.logp for _, request in live if request.logp is not None]  # all of them: none is _done
        drawn = self.rules.sample_rows(torch.stack(logps), rows) if live else []
        tokens, positions = [0] * self.config.slots, [0] * self.config.slots
        for (slot, request), token in zip(live, drawn, strict=True):
            if token in self.rules.stop_ids:
                self._retire(slot)
                continue
            request.decoded.append(token)
            request.out.put(token)
            tokens[slot], positions[slot] = token, request.length + len(request.decoded) - 1
        if not self.active:
            return
        _copy_in(tokens, self.runner.tokens)
        _copy_in(positions, self.runner.positions)
        logp = self.runner.step(max(positions[slot] for slot in self.active) + 1, max(self.active) + 1)
        for slot, request in self.active.items():
            request.logp = logp[slot]
        self.cycles.add(len(live), time.perf_counter() - start)

    def _advance_on_device(self, sampler: SlotSampler) -> None:
        """Draw every slot's token on the device, feed them to the next step and launch it, then read the tokens
        (the host's work overlaps the step). A row that drew a stop id stepped once for nothing; its slot is free."""
        if not self.active:
            return
        live, start = list(self.active.items()), time.perf_counter()
        longest = max(request.length + len(request.decoded) for _, request in live) + 1
        rows, _ = self.runner.shape_of(longest, max(self.active) + 1)
        self.readback.start(sampler.next_inputs(self.runner.logp[:rows], self.runner.tokens, self.runner.positions))
        self.runner.step(longest, rows)
        tokens = self.readback.finish(rows)
        for slot, request in live:
            token = tokens[slot]
            if token in self.rules.stop_ids:
                self._retire(slot)
                continue
            request.decoded.append(token)
            request.out.put(token)
        self.cycles.add(len(live), time.perf_counter() - start)

    def _done(self, request: _Request) -> bool:
        """Abandoned, not yet prefilled, or at ``max_len``: no token to draw."""
        return request.abandoned or request.logp is None or len(request.decoded) >= request.max_len

    def _retire(self, slot: int) -> None:
        self.active.pop(slot).out.put(_END)
        if self.sampler is not None:
            self.sampler.release(slot)


def _copy_in(values: list[int], into: torch.Tensor) -> None:
    """Host values into a device buffer without waiting for the device: from pinned memory, in stream order (a
    copy from pageable memory waits for all queued work first)."""
    host = torch.tensor(values, dtype=into.dtype)
    if into.is_cuda:
        host = host.pin_memory()
    into.copy_(host, non_blocking=into.is_cuda)


def install_batched_decode(llm: Any, config: BatchConfig) -> DecodeBatcher:
    """Route this LLM instance's token loop through a shared ``DecodeBatcher`` (upstream's class is untouched);
    ``max_len`` is cut to what its cache holds;
    a request whose prompt leaves no room runs upstream's own loop."""
    batcher = DecodeBatcher(llm, config)
    original = llm.inference_wrapper

    def inference_wrapper(
        lm_input: torch.Tensor, sampling: int, min_len: int, max_len: int, uuid: str
    ) -> Iterator[int]:
        room = batcher.room(lm_input, min_len, max_len)
        if hasattr(llm, "vllm") or room is None:
            yield from original(lm_input, sampling, min_len, max_len, uuid)
            return
        yield from batcher.decode(lm_input, min_len, room, seed=batcher.seed_source())

    llm.inference_wrapper = inference_wrapper
    log.info("batched decode: %d slots, cache %.1f MiB", config.slots, batcher.runner.cache.nbytes / 2**20)
    return batcher
