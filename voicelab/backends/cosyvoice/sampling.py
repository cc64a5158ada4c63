"""Upstream's repetition-aware sampling (``ras_sampling`` in cosyvoice/utils/common.py), reproduced exactly but
without its per-candidate Python loop over device tensors (one device sync per candidate: up to 25 a token).

Upstream draws a token in two stages: nucleus sampling over the softmax (candidates in stable descending order,
taken while the running sum, accumulated one addition at a time in the scores' dtype, is below ``top_p`` and fewer
than ``top_k`` are taken), then, when that token occurs ``win_size * tau_r`` times or more in the last ``win_size``
tokens, a draw over the whole softmax with that token excluded. Both draws are ``multinomial(1)``, which PyTorch
computes as ``argmax(p / q)`` with ``q ~ Exp(1)`` drawn from the device's generator; we draw the same ``q`` from
the same generator in the same order, so a fixed seed gives upstream's token. The softmax, sort, noise and argmax
run on the scores' device; only the top-``k`` running sum (at most 25 additions) and the window count run on the
host, where their arithmetic is the same as upstream's.

``TokenRules.sample_rows`` draws every row of a decode step at once, each from its own generator, so a row's token
is the one it would draw alone (``TokenRules.sample`` is one row of it): the host waits for the device twice a step
(the top-``k`` probabilities of all rows, then their tokens) and once more only when a row's token repeats, where
one row drawn by itself waited six or seven times (a Python scalar written into a device tensor is a blocking copy;
so is a device tensor used as an index).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

HOST_DTYPES: dict[torch.dtype, type[np.floating[Any]]] = {
    torch.float32: np.float32,
    torch.float16: np.float16,
    torch.float64: np.float64,
}


@dataclass(frozen=True)
class RasParams:
    """The keyword arguments upstream's YAML binds to ``ras_sampling`` (its example configs' values)."""

    top_p: float = 0.8
    top_k: int = 25
    win_size: int = 10
    tau_r: float = 0.1

    @classmethod
    def of(cls, sampling: Callable[..., int]) -> RasParams:
        """The parameters of an upstream sampler (a ``functools.partial`` of ``ras_sampling``).

        Raises ``ValueError`` for any other sampler: the fast path reproduces only this one."""
        func = getattr(sampling, "func", None)
        if getattr(func, "__name__", "") != "ras_sampling":
            raise ValueError(f"the fast decode path reproduces ras_sampling only, not {sampling!r}")
        defaults = cls()
        keywords: dict[str, Any] = dict(getattr(sampling, "keywords", {}))
        return cls(
            top_p=float(keywords.get("top_p", defaults.top_p)),
            top_k=int(keywords.get("top_k", defaults.top_k)),
            win_size=int(keywords.get("win_size", defaults.win_size)),
            tau_r=float(keywords.get("tau_r", defaults.tau_r)),
        )


def nucleus_size(top: torch.Tensor, top_p: float, top_k: int) -> int:
    """How many of the sorted probabilities ``top`` (on the host) upstream's loop takes.

    The running sum is added one value at a time in ``top``'s dtype and compared with ``top_p`` cast to that
    dtype, as upstream's tensor arithmetic does; at least one candidate is always taken."""
    host = HOST_DTYPES.get(top.dtype)
    if host is not None:
        values, limit = top.numpy().astype(host, copy=False), host(top_p)
        total, count = host(0.0), 0
        for value in values[:top_k]:
            if count and not total < limit:
                break
            total, count = host(total + value), count + 1
        return count
    running: torch.Tensor | None = None  # bfloat16: numpy has no such type, so add with torch on the host
    count = 0
    for value in top[:top_k].unbind():
        if running is not None and not bool(running < top_p):
            break
        running = value.clone() if running is None else running + value
        count += 1
    return count


@dataclass(frozen=True)
class TokenRules:
    """What upstream's ``inference_wrapper`` and ``sampling_ids`` do around the sampler, for one LLM.

    end_id: the id ``sampling_ids`` masks while fewer than ``min_len`` tokens exist (``speech_token_size``).
    stop_ids: ids that end the utterance. banned: ids never drawn (random-weight models mask every stop id)."""

    params: RasParams
    stop_ids: frozenset[int]
    end_id: int
    banned: torch.Tensor | None

    @classmethod
    def of(cls, llm: Any, mask_stops: bool) -> TokenRules:
        stops = frozenset(int(t) for t in getattr(llm, "stop_token_ids", [llm.speech_token_size]))
        device = llm.llm_decoder.weight.device
        banned = torch.tensor(sorted(stops), device=device) if mask_stops else None
        return cls(RasParams.of(llm.sampling), stops, int(llm.speech_token_size), banned)

    def sample(
        self, logp: torch.Tensor, decoded: Sequence[int], min_len: int, generator: torch.Generator | None = None
    ) -> int:
        """The next token after ``decoded`` from its (vocabulary,) log-probabilities (left unchanged)."""
        return self.sample_rows(logp[None], [Row(decoded, min_len, generator)])[0]

    def sample_rows(self, logp: torch.Tensor, rows: Sequence[Row]) -> list[int]:
        """Each row's next token from its row of (rows, vocabulary) log-probabilities (left unchanged), drawn from
        the row's own generator as upstream's ``ras_sampling`` draws, with two waits for the device in all."""
        scores = logp.clone()
        if self.banned is not None:
            scores.index_fill_(1, self.banned, -float("inf"))
        for index, row in enumerate(rows):
            if len(row.decoded) < row.min_len:
                scores[index, self.end_id].fill_(-float("inf"))
        values, indices = scores.softmax(dim=1).sort(dim=1, descending=True, stable=True)
        top = values[:, : self.params.top_k]
        ratios = torch.full_like(top, -float("inf"))  # argmax(p / q) over each row's nucleus, as multinomial(1)
        for index, (row, top_host) in enumerate(zip(rows, top.cpu(), strict=True)):
            count = nucleus_size(top_host, self.params.top_p, self.params.top_k)
            noise = torch.empty_like(top[index, :count]).exponential_(1, generator=row.generator)
            torch.div(top[index, :count], noise, out=ratios[index, :count])
        tokens = indices.gather(1, ratios.argmax(dim=1, keepdim=True)).squeeze(1).tolist()
        repeated = [i for i, row in enumerate(rows) if _too_frequent(tokens[i], row.decoded, self.params)]
        if repeated:  # upstream then draws over the whole softmax, that token excluded
            for index in repeated:
                scores[index, tokens[index]].fill_(-float("inf"))
            prob = torch.stack([scores[index] for index in repeated]).softmax(dim=1)  # a list index would copy
            noise = torch.stack([
                torch.empty_like(prob[0]).exponential_(1, generator=rows[index].generator) for index in repeated
            ])  # fmt: skip
            for index, token in zip(repeated, (prob / noise).argmax(dim=1).tolist(), strict=True):
                tokens[index] = token
        return tokens


class Row(NamedTuple):
    """One request's state for ``sample_rows``: the tokens it decoded, its ``min_len`` and its generator (``None``:
    the device's default one, upstream's)."""

    decoded: Sequence[int]
    min_len: int
    generator: torch.Generator | None


def _too_frequent(token: int, decoded: Sequence[int], params: RasParams) -> bool:
    """Upstream's repetition rule: ``token`` occurs ``win_size * tau_r`` times or more in the last ``win_size``."""
    return list(decoded[-params.win_size :]).count(token) >= params.win_size * params.tau_r
