"""Interval sleeps end on a 100 ms grid, so watches started at scattered moments share event-loop wake-ups."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mcpg_gateway.strategies.base import WAKE_GRID_S, wake_at

NOW = st.floats(min_value=0, max_value=10_000_000, allow_nan=False)
SECONDS = st.floats(min_value=0, max_value=86_400, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(now=NOW, seconds=SECONDS)
def test_an_interval_ends_on_the_grid_no_earlier_than_asked_and_within_one_step(now: float, seconds: float) -> None:
    end = wake_at(now, seconds)
    assert end >= now + seconds - 1e-6
    assert end < now + seconds + WAKE_GRID_S + 1e-6
    assert abs(end / WAKE_GRID_S - round(end / WAKE_GRID_S)) < 1e-6


@settings(max_examples=300, deadline=None)
@given(starts=st.lists(st.floats(min_value=1000, max_value=1000.0999), min_size=2, max_size=50))
def test_watches_started_within_one_step_wake_together(starts: list[float]) -> None:
    assert len({wake_at(start, 10.0) for start in starts}) <= 2  # the grid point, or the next when on its edge
    assert wake_at(1000.0, 10.0) == wake_at(1000.0, 10.0 - 1e-9) == 1010.0
