"""Per-row sampling for batched VITS: each row's noise drawn alone, at its own length, from its own generator.

A row's audio then depends on its request's seed and text only, never on the rows it is padded with, so
requests batched together say exactly what each says alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

Scale = float | Sequence[float]  # one value for every row, or one per row
Generators = torch.Generator | Sequence[torch.Generator | None] | None  # one for every row, or one per row


@dataclass(frozen=True)
class RowControls:
    """The sampling controls of each row of a batch (rows of different requests may differ)."""

    noise_scale: tuple[float, ...]
    length_scale: tuple[float, ...]
    noise_w: tuple[float, ...]
    generators: tuple[torch.Generator | None, ...]


def row_noise(
    channels: int,
    counts: list[int],
    width: int,
    scales: tuple[float, ...],
    generators: tuple[torch.Generator | None, ...],
    like: torch.Tensor,
) -> torch.Tensor:
    """[B, channels, width] standard normal noise times each row's scale, zero past each row's count.

    Row i is drawn alone as [1, channels, counts[i]] from its own generator (on the generator's device), in row
    order; a row whose scale is 0 draws nothing. A lone row is drawn straight into place (one kernel).
    """
    b = len(counts)
    if all(s == 0 for s in scales):
        return torch.zeros((b, channels, width), dtype=like.dtype, device=like.device)
    if b == 1 and counts[0] == width:
        return draw((1, channels, width), generators[0], like) * scales[0]
    noise = torch.zeros((b, channels, width), dtype=like.dtype, device=like.device)
    for row, (count, scale, generator) in enumerate(zip(counts, scales, generators, strict=True)):
        if scale != 0 and count > 0:
            noise[row, :, :count] = draw((channels, count), generator, like) * scale
    return noise


def draw(shape: tuple[int, ...], generator: torch.Generator | None, like: torch.Tensor) -> torch.Tensor:
    device = generator.device if generator is not None else like.device
    return torch.randn(shape, generator=generator, dtype=like.dtype, device=device).to(like.device)


def per_row(value: Scale, rows: int) -> tuple[float, ...]:
    if isinstance(value, int | float):
        return (float(value),) * rows
    values = tuple(float(v) for v in value)
    assert len(values) == rows, f"{len(values)} values for {rows} rows"
    return values


def generators_for(value: Generators, rows: int) -> tuple[torch.Generator | None, ...]:
    if value is None or isinstance(value, torch.Generator):
        return (value,) * rows
    assert len(value) == rows, f"{len(value)} generators for {rows} rows"
    return tuple(value)
