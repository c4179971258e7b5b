"""A query that found nothing waits a minute before it is asked again, whatever the clock does."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.providers.prometheus.absent import RECHECK_S, Absent
from tests.support.fuzzing import examples

pytestmark = pytest.mark.unit


def test_found_is_asked_every_time_nothing_found_once_a_minute() -> None:
    absent: Absent[str] = Absent()
    assert absent.due("gpu", 1000.0)
    absent.answered("gpu", 1000.0, "empty", found=False)
    assert [absent.due("gpu", 1000.0 + s) for s in (0.0, 15.0, 59.9, 60.0, 75.0)] == [
        False,
        False,
        False,
        True,
        True,
    ]
    assert absent.last("gpu") == "empty"
    absent.answered("gpu", 1060.0, "rows", found=True)
    assert absent.due("gpu", 1060.5) and absent.due("cpu", 1060.5)


# Times in eighths of a second: exact in floats, so that the sums are exact too.
@given(
    st.integers(0, 8 * 10**9).map(lambda n: n / 8),
    st.integers(-8 * 10**6, 8 * 10**6).map(lambda n: n / 8),
)
@settings(max_examples=examples(300), deadline=None)
def test_a_query_is_held_back_only_within_the_minute_after_it_found_nothing(
    at: float, later: float
) -> None:
    """A clock stepped back (``later`` < 0) or far ahead never holds a query back longer
    than the recheck interval measured from when it found nothing."""
    absent: Absent[None] = Absent()
    absent.answered("q", at, None, found=False)
    held = not absent.due("q", at + later)
    assert held == (0.0 <= later < RECHECK_S)
