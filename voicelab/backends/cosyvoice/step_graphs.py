"""The speech-token LLM's decode step with fixed inputs and outputs, replayed from CUDA graphs on CUDA.

A step reads each slot's last token and position from two small device tensors, runs the static-cache Qwen
body and upstream's ``llm_decoder``, and leaves log-probabilities in a fixed (slots, vocabulary) tensor. On CUDA
one graph per (row bucket, length bucket) is captured when the runner is built (one memory pool shared by all of
them): a step runs over the shortest length bucket that holds every slot in use (and, if asked, only the first
1, 2, 4, ... slots) and costs one graph launch instead of hundreds of kernel launches from Python. Elsewhere the
same code runs eagerly (the CPU fallback, and what the tests compare).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F

from voicelab.backends.base import GraphBucket
from voicelab.backends.cosyvoice import step_choice
from voicelab.backends.cosyvoice.kv_cache import StaticKvCache, fit
from voicelab.backends.cosyvoice.prefill_graphs import PrefillGraphs
from voicelab.backends.cosyvoice.static_qwen import StaticQwen
from voicelab.backends.cuda_graphs import device_ms

log = logging.getLogger(__name__)


class StepRunner:
    """``llm`` is upstream's ``Qwen2LM``/``CosyVoice3LM``; ``graphs`` turns capture on (CUDA only).

    shrink_rows: run only the first 1, 2, 4, ... slots that hold requests. Off, every step has the same shapes,
    so each request's numbers are bitwise the same whoever shares the step (a batch equals each run alone);
    on, a lone request in a large cache does less work, at the price of other kernels for other row counts.
    kernels: "torch", "triton" (``StaticQwen``) or "auto" (both captured, the faster kept per shape where they
    agree: ``step_choice``; eager steps run PyTorch's kernels)."""

    def __init__(
        self, llm: Any, cache: StaticKvCache, graphs: bool, shrink_rows: bool = False, kernels: str = "torch"
    ) -> None:
        self.llm, self.cache = llm, cache
        self.row_buckets = cache.row_buckets(shrink_rows)
        self.qwen = StaticQwen(llm.llm.model.model, cache, kernels)
        device = cache.keys.device
        vocabulary = int(llm.llm_decoder.out_features)
        self.tokens = torch.zeros(cache.slots, dtype=torch.long, device=device)
        self.positions = torch.zeros(cache.slots, dtype=torch.long, device=device)
        self.logp = torch.zeros(cache.slots, vocabulary, dtype=cache.keys.dtype, device=device)
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}  # (rows, length bucket) -> graph
        self.kernels_for: dict[tuple[int, int], str] = {}  # the side each captured shape replays (auto: chosen)
        self.reports: list[GraphBucket] = []  # one per graph, for the panel: its memory, warm-up (eager) and replay ms
        self.prefills: PrefillGraphs | None = None
        if graphs and device.type == "cuda":
            self._capture_or_fall_back()
            self.prefills = PrefillGraphs(self.qwen, cache, self._head, vocabulary, graphs=True)
            self.reports += self.prefills.reports

    def _capture_or_fall_back(self) -> None:
        """Capture every shape; if that fails with both sides (``auto``), again with PyTorch's kernels alone; if it
        fails with those, the same steps eagerly."""
        attempts = [self.qwen.sides] + ([("torch",)] if len(self.qwen.sides) > 1 else [])
        for attempt, sides in enumerate(attempts):
            try:
                self._capture_all(sides)
                return
            except RuntimeError as exc:  # e.g. a kernel that cannot be captured
                self.graphs.clear()
                self.kernels_for.clear()
                self.reports.clear()
                torch.cuda.synchronize()
                then = "again with PyTorch's kernels only" if attempt + 1 < len(attempts) else "decoding eagerly"
                log.warning("CUDA graph capture failed, %s: %s", then, exc)

    @property
    def captured(self) -> bool:
        return bool(self.graphs)

    def prefill(self, embeds: torch.Tensor, slot: int) -> torch.Tensor:
        """A prompt into ``slot``; the log-probabilities of its next token, (vocabulary,). On CUDA from a captured
        prefill bucket where one holds the prompt (``prefill_graphs``)."""
        logp = self.prefills.prefill(embeds, slot) if self.prefills is not None else None
        if logp is not None:
            return logp
        return self._head(self.qwen.prefill(embeds, slot))[0]

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """(rows, hidden) after the final norm -> (rows, vocabulary) log-probabilities."""
        return self.llm.llm_decoder(hidden).log_softmax(dim=-1)

    def _eager(self, rows: int, length: int, side: str | None = None) -> None:
        """One step of the first ``rows`` slots over ``length`` positions with ``side``'s kernels (by default the
        shape's chosen side, else the first the model offers)."""
        side = side or self.kernels_for.get((rows, length), self.qwen.sides[0])
        embeds = F.embedding(self.tokens[:rows], self.llm.speech_embedding.weight).unsqueeze(1)
        hidden = self.qwen.step(embeds, self.positions[:rows], length, side)
        self.logp[:rows].copy_(self._head(hidden))

    def step(self, longest: int, slots: int = 1) -> torch.Tensor:
        """Advance slots 0..slots-1 by one token (``tokens``/``positions`` set by the caller); ``longest`` is
        the largest position + 1 among them. Returns ``logp`` (its first ``slots`` rows are this step's; all are
        overwritten by the next step). Rows and length are rounded up to their buckets."""
        rows, bucket = self.shape_of(longest, slots)
        graph = self.graphs.get((rows, bucket))
        if graph is not None:
            graph.replay()
        else:
            self._eager(rows, bucket)
        return self.logp

    def shape_of(self, longest: int, slots: int) -> tuple[int, int]:
        """The (rows, length) bucket a step of ``slots`` slots up to position ``longest`` runs in."""
        return fit(self.row_buckets, slots, "slots"), self.cache.bucket(longest)

    @torch.inference_mode()
    def _capture_all(self, sides: tuple[str, ...]) -> None:
        """Capture one graph per bucket and side (``auto``: both, then one kept per shape, ``step_choice``). The
        warm-up and capture write slot positions 0 (token 0), which any request's prefill overwrites before
        reading."""
        self.tokens.zero_()
        self.positions.zero_()
        shapes = [(rows, length) for rows in self.row_buckets for length in self.cache.buckets]
        variants = [(shape, side) for shape in shapes for side in self._usable_sides(sides, shapes)]
        eager_ms = self._warm_up(variants)
        pool, graphs, added = None, {}, {}
        for shape, side in variants:
            allocated = torch.cuda.memory_allocated()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._eager(*shape, side)
            pool = graph.pool()
            graphs[shape, side] = graph
            added[shape, side] = torch.cuda.memory_allocated() - allocated  # the shared pool: most in the first
        torch.cuda.synchronize()
        replay_ms = self._choose(shapes, graphs)
        for (shape, side), graph in graphs.items():
            kept = self.kernels_for[shape] == side
            if kept:
                self.graphs[shape] = graph  # a side not kept is dropped: its memory goes back to the shared pool
            self.reports.append(GraphBucket(step_choice.STAGES[side], *shape, added[shape, side],
                                            eager_ms[shape, side], replay_ms[shape, side], kept))  # fmt: skip
        chosen = {side: sorted(s for s, k in self.kernels_for.items() if k == side) for side in step_choice.SIDES}
        log.info("captured %d decode-step graphs (rows %s x lengths %s); kernels per shape: %s", len(shapes),
                 self.row_buckets, self.cache.buckets, chosen)  # fmt: skip

    def _usable_sides(self, sides: tuple[str, ...], shapes: list[tuple[int, int]]) -> tuple[str, ...]:
        """The sides to capture. Triton's step first runs once at every shape, so that its kernels compile before
        the timed warm-up: if that fails here (a Triton too old for the card, say), ``auto`` goes on with PyTorch's
        kernels alone, with a warning; a user who asked for ``triton`` gets the error."""
        if "triton" not in sides:
            return sides
        try:
            for shape in shapes:
                self._eager(*shape, "triton")
            torch.cuda.synchronize()
        except Exception as exc:  # Triton's compiler raises its own types; auto has a fallback
            if sides == ("triton",):
                raise
            log.warning("decode_kernels=auto: the Triton step failed here, PyTorch's kernels only: %s", exc)
            return ("torch",)
        return sides

    def _warm_up(self, variants: list[tuple[tuple[int, int], str]]) -> dict[tuple[tuple[int, int], str], float]:
        """Each variant's step once on a side stream, timed as its eager ms: kernels chosen and workspaces
        allocated outside the graphs (Triton's compiled before, ``_usable_sides``)."""
        side_stream = torch.cuda.Stream(device=self.cache.keys.device)
        side_stream.wait_stream(torch.cuda.current_stream())
        events = {v: (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for v in variants}
        with torch.cuda.stream(side_stream):
            for (shape, side), (start, end) in events.items():
                start.record()
                self._eager(*shape, side)
                end.record()
        torch.cuda.current_stream().wait_stream(side_stream)
        torch.cuda.synchronize()
        return {variant: start.elapsed_time(end) for variant, (start, end) in events.items()}

    def _choose(
        self, shapes: list[tuple[int, int]], graphs: dict[tuple[tuple[int, int], str], torch.cuda.CUDAGraph]
    ) -> dict[tuple[tuple[int, int], str], float]:
        """Set ``kernels_for`` for every shape; each graph's replay ms. With one side, it; with both, the
        ``step_choice`` trial on a random cache, cleared after."""
        sides = {side for _, side in graphs}
        if len(sides) == 1:
            (side,) = sides
            self.kernels_for.update((shape, side) for shape in shapes)
            return {variant: device_ms(graph.replay) for variant, graph in graphs.items()}
        replay_ms: dict[tuple[tuple[int, int], str], float] = {}
        vocabulary = self.llm.speech_embedding.weight.shape[0]
        step_choice.trial_inputs(self.cache, self.tokens, self.positions, vocabulary)
        try:
            for shape in shapes:
                steps = {side: graphs[shape, side].replay for side in step_choice.SIDES}
                trial = step_choice.compare(steps, self.logp, self.positions, shape, step_choice.timed)
                self.kernels_for[shape] = trial.winner
                replay_ms.update(((shape, side), ms) for side, ms in trial.ms.items())
                log.debug("decode step %s: %s (Triton within %.2g of PyTorch's log-probabilities)", shape,
                          trial.ms, trial.difference)  # fmt: skip
        finally:
            step_choice.clear(self.cache, self.tokens, self.positions)
        return replay_ms
