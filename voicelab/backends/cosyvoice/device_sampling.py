"""Upstream's repetition-aware sampling drawn on the device for every slot at once (backend option
``decode_sampling=device``, the default): the host reads only the tokens, once a step, and the next step is launched
first (``batch_decode``, and ``fast_decode`` for one slot).

``TokenRules.sample_rows`` reproduces upstream's random stream exactly, which needs each row's nucleus size on the
host before its noise is drawn: the host waits for the device twice a step, and the per-row draws cost ~0.1 ms a row
(1.8 ms a step at 16 rows on an H100, against a 4.3 ms step). ``SlotSampler`` draws from the same distribution
with no wait at all: upstream's nucleus (softmax, candidates in descending order taken while the running sum of those
before is below ``top_p``, at most ``top_k``) and its whole-softmax redraw when the token occurs ``win_size * tau_r``
times or more in the last ``win_size``, each draw by inverse CDF from one uniform number. A request's uniforms are
drawn once, when it is admitted, from its own generator (two a token, for as many tokens as its cache slot holds), so
a fixed seed gives the same tokens whoever shares its steps; they are not upstream's tokens for that seed, which the
exact sampler (``decode_sampling=exact``) keeps. The last ``win_size`` tokens of each slot live on the device too.

Nothing in a draw is random or read from the host, so on CUDA each row bucket's draw (with the next step's inputs)
is captured in a CUDA graph when the decoder is built: ~40 small kernels eagerly cost ~1.2 ms of launches a step on
an H100 whatever the rows; one replay costs one launch.

The arithmetic is float32 whatever the model's dtype. Where its running sums differ from upstream's one-at-a-time
additions in the scores' dtype (a parallel prefix sum: a few float32 ulps; a bfloat16 model's upstream sums round to
bfloat16), a candidate whose preceding sum lies that close to ``top_p`` can fall on the other side of the cut; that
is the only difference from upstream's distribution, and the tests check the rest against it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from voicelab.backends.base import GraphBucket
from voicelab.backends.cosyvoice.sampling import TokenRules
from voicelab.backends.cuda_graphs import SideStream, capture, device_ms, warm_up

if TYPE_CHECKING:
    from voicelab.backends.cosyvoice.step_graphs import StepRunner

log = logging.getLogger(__name__)
STAGE = "llm sampling"  # the panel's name for the draws' graphs


@dataclass(frozen=True)
class SlotState:
    """Per-slot tensors on the device. uniforms: (slots, capacity, 2), each token's two numbers in [0, 1).
    window: (slots, win_size) the last tokens, -1 where none yet. count: tokens drawn so far. min_len: while
    ``count`` is below it the end id is masked. start: the prompt's length (the first token's position).
    active: slots that hold a request (others step at position 0 with token 0)."""

    uniforms: torch.Tensor
    window: torch.Tensor
    count: torch.Tensor
    min_len: torch.Tensor
    start: torch.Tensor
    active: torch.Tensor


class SlotSampler:
    """Used by one thread at a time (the batch driver's, or the one-slot decoder's request under its lock); every
    method only queues device work (nothing waits)."""

    def __init__(self, rules: TokenRules, slots: int, capacity: int, device: torch.device) -> None:
        self.rules, self.capacity = rules, capacity
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}  # rows -> graph, its drawn tokens
        self.reports: list[GraphBucket] = []
        self.side = SideStream()  # every row bucket's warm-up and capture
        self.state = SlotState(
            uniforms=torch.zeros(slots, capacity, 2, device=device),
            window=torch.full((slots, rules.params.win_size), -1, dtype=torch.long, device=device),
            count=torch.zeros(slots, dtype=torch.long, device=device),
            min_len=torch.zeros(slots, dtype=torch.long, device=device),
            start=torch.zeros(slots, dtype=torch.long, device=device),
            active=torch.zeros(slots, dtype=torch.bool, device=device),
        )

    @classmethod
    def beside(cls, runner: StepRunner, rules: TokenRules, capacity: int) -> SlotSampler:
        """A sampler for every slot of ``runner``'s step (its scores, tokens and positions), each row bucket's draw
        captured where the step's graphs were."""
        sampler = cls(rules, runner.logp.shape[0], capacity, runner.logp.device)
        if runner.captured:
            sampler.capture(runner.logp, runner.tokens, runner.positions, runner.row_buckets)
        return sampler

    def admit(self, slot: int, generator: torch.Generator, min_len: int, start: int) -> None:
        """A new request in ``slot``: its uniforms from ``generator``, an empty window, nothing drawn yet."""
        state = self.state
        state.uniforms[slot].copy_(
            torch.rand(state.uniforms.shape[1:], generator=generator, device=state.uniforms.device)
        )
        state.window[slot].fill_(-1)
        state.count[slot].fill_(0)
        state.min_len[slot].fill_(min_len)
        state.start[slot].fill_(start)
        state.active[slot].fill_(True)

    def release(self, slot: int) -> None:
        self.state.active[slot].fill_(False)

    def next_inputs(self, logp: torch.Tensor, into_tokens: torch.Tensor, into_positions: torch.Tensor) -> torch.Tensor:
        """``draw`` then ``feed``, replayed from this row count's graph where one was captured: the drawn tokens
        (a graph's output buffer, overwritten by its next replay)."""
        captured = self.graphs.get(logp.shape[0])
        if captured is None:
            return self._eager_next(logp, into_tokens, into_positions)
        graph, tokens = captured
        graph.replay()
        return tokens

    def capture(
        self, logp: torch.Tensor, into_tokens: torch.Tensor, into_positions: torch.Tensor, row_buckets: Sequence[int]
    ) -> None:
        """One graph per row bucket of ``next_inputs`` over the first rows of ``logp`` (the step's output buffer),
        kept where it replays faster than the eager draw; if a capture fails, eager draws (with a warning). The
        warm-up draws are undone: no slot is admitted yet."""
        try:
            self._capture(logp, into_tokens, into_positions, row_buckets)
        except RuntimeError as exc:
            self.graphs.clear()
            torch.cuda.synchronize()
            log.warning("decode sampling: CUDA graph capture failed, drawing eagerly: %s", exc)
        self.state.window.fill_(-1)
        for tensor in (self.state.count, self.state.active, into_tokens, into_positions):
            tensor.fill_(0)

    def _capture(
        self, logp: torch.Tensor, into_tokens: torch.Tensor, into_positions: torch.Tensor, row_buckets: Sequence[int]
    ) -> None:
        pool = None
        for rows in row_buckets:
            call = functools.partial(self._eager_next, logp[:rows], into_tokens, into_positions)
            warm_up(call, self.side)
            eager_ms = device_ms(call)
            allocated = torch.cuda.memory_allocated()
            graph, tokens = capture(call, pool, self.side)
            pool = graph.pool()
            added, graph_ms = torch.cuda.memory_allocated() - allocated, device_ms(graph.replay)
            kept = graph_ms < eager_ms
            if kept:
                self.graphs[rows] = (graph, tokens)
            self.reports.append(GraphBucket(STAGE, rows, logp.shape[1], added, eager_ms, graph_ms, kept))
        torch.cuda.synchronize()
        log.info("decode sampling on the device: %d of %d row buckets replay from CUDA graphs (%s)", len(self.graphs),
                 len(row_buckets), ", ".join(f"{r.rows} rows {r.eager_ms:.2f} -> {r.graph_ms:.2f} ms"
                                             for r in self.reports))  # fmt: skip

    def _eager_next(self, logp: torch.Tensor, into_tokens: torch.Tensor, into_positions: torch.Tensor) -> torch.Tensor:
        tokens = self.draw(logp)
        self.feed(tokens, into_tokens, into_positions)
        return tokens

    def draw(self, logp: torch.Tensor) -> torch.Tensor:
        """The next token of the first ``len(logp)`` slots from their (rows, vocabulary) log-probabilities (left
        unchanged); each drawn token enters its slot's window. Rows of free slots draw too (and are ignored)."""
        rows, state = logp.shape[0], self.state
        count = state.count[:rows]
        index = count.clamp(max=self.capacity - 1)
        uniforms = state.uniforms[:rows].gather(1, index.view(rows, 1, 1).expand(rows, 1, 2)).squeeze(1)
        tokens = draw_tokens(self.rules, logp, uniforms, state.window[:rows], count, state.min_len[:rows])
        state.window[:rows].scatter_(1, (count % state.window.shape[1]).unsqueeze(1), tokens.unsqueeze(1))
        count.add_(1)
        return tokens

    def feed(self, tokens: torch.Tensor, into_tokens: torch.Tensor, into_positions: torch.Tensor) -> None:
        """The next step's inputs for the slots of ``tokens`` (just drawn): each its token at its position, free
        slots token 0 at position 0 (inside any length bucket)."""
        rows, state = tokens.shape[0], self.state
        active = state.active[:rows]
        into_tokens[:rows].copy_(torch.where(active, tokens, 0))
        into_positions[:rows].copy_(torch.where(active, state.start[:rows] + state.count[:rows] - 1, 0))


def draw_tokens(
    rules: TokenRules,
    logp: torch.Tensor,
    uniforms: torch.Tensor,
    window: torch.Tensor,
    count: torch.Tensor,
    min_len: torch.Tensor,
) -> torch.Tensor:
    """Each row's token by upstream's rules: (rows, vocabulary) log-probabilities, (rows, 2) uniforms (the nucleus
    draw's, the redraw's), (rows, win) recent tokens, (rows,) tokens drawn and ``min_len``. Float32 throughout."""
    scores = logp.to(torch.float32, copy=True)
    if rules.banned is not None:
        scores.index_fill_(1, rules.banned, -float("inf"))
    scores[:, rules.end_id].masked_fill_(count < min_len, -float("inf"))
    top, ids = scores.softmax(dim=1).sort(dim=1, descending=True, stable=True)  # ties in id order, as upstream
    top, ids = top[:, : rules.params.top_k], ids[:, : rules.params.top_k]
    before = top.cumsum(dim=1) - top
    keep = before < rules.params.top_p
    keep[:, 0] = True
    token = ids.gather(1, _inverse_cdf(top * keep, uniforms[:, :1]))
    repeated = (window == token).sum(dim=1, keepdim=True) >= rules.params.win_size * rules.params.tau_r
    others = scores.scatter(1, token, -float("inf")).softmax(dim=1)
    redrawn = _inverse_cdf(others, uniforms[:, 1:])
    return torch.where(repeated, redrawn, token).squeeze(1)


def _inverse_cdf(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """(rows, 1) indices drawn in proportion to each row's non-negative ``weights`` by one uniform in [0, 1): the
    first index whose running sum passes ``uniform`` x the total; never one of weight 0 (a product that rounds up to
    the total takes the last index with weight)."""
    running = weights.cumsum(dim=1)
    total = running[:, -1:]
    picked = (running <= uniform * total).sum(dim=1, keepdim=True)
    last = (running < total).sum(dim=1, keepdim=True)  # the first index reaching the total: the last with weight
    return torch.minimum(picked, last)


class Readback:
    """Tokens drawn on the device, copied to the host behind the work queued so far and read when needed: on CUDA
    into pinned memory with an event, so launching more work between ``start`` and ``finish`` does not wait."""

    def __init__(self, slots: int, device: torch.device) -> None:
        cuda = device.type == "cuda"
        self.host = torch.zeros(slots, dtype=torch.long, pin_memory=cuda)
        self.event = torch.cuda.Event() if cuda else None

    def start(self, drawn: torch.Tensor) -> None:
        self.host[: drawn.shape[0]].copy_(drawn, non_blocking=self.event is not None)
        if self.event is not None:
            self.event.record()

    def finish(self, rows: int) -> list[int]:
        if self.event is not None:
            self.event.synchronize()
        return self.host[:rows].tolist()
