"""The shape ladders device work is rounded onto: few sizes, each within a quarter of the one below."""

from __future__ import annotations

import itertools

import pytest

from voicelab.voice.shapes import LADDER_RATIO, ladder, on_ladder, rounded_up


@pytest.mark.parametrize("step", [1, 8, 64, 5512, 8000])
def test_every_rung_is_a_multiple_of_the_step_at_most_a_quarter_above_the_last(step: int) -> None:
    rungs = ladder(step, 600 * step)
    assert rungs[0] == step and all(rung % step == 0 for rung in rungs)
    for low, high in itertools.pairwise(rungs):
        assert low < high <= max(low + step, rounded_up(int(low * LADDER_RATIO) + 1, step))
    assert len(rungs) < 40  # 600 steps in a few dozen shapes, where rounding to the step alone gives 600


@pytest.mark.parametrize("step", [8, 8000])
def test_a_size_lands_on_the_smallest_rung_that_holds_it(step: int) -> None:
    rungs = ladder(step, 100 * step)
    for n in [1, step - 1, step, step + 1, *range(2 * step, 100 * step, 7 * step + 3)]:
        landed = on_ladder(n, step)
        assert landed >= n and landed in rungs
        assert all(rung < n for rung in rungs if rung < landed)


def test_the_ladder_ends_at_the_first_rung_reaching_its_limit() -> None:
    assert ladder(8000, 48_000) == (8000, 16000, 24000, 32000, 40000, 56000)  # 0.5 s to 3.5 s at 16 kHz
    assert ladder(8, 8) == (8,)
    assert ladder(64, 4000)[-1] == on_ladder(4000, 64) >= 4000
