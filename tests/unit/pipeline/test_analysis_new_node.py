"""A node whose first samples just arrived is ``low_coverage``, from its first sample on."""

from __future__ import annotations

import numpy as np
import pytest

from loadwatcher.model import Resource, Series
from loadwatcher.pipeline import analysis
from loadwatcher.pipeline.store import SampleStore

NOW = 100_000.0


def _tags(times: list[float], min_coverage: float = 0.5) -> dict[str, object]:
    store = SampleStore()
    ts = np.asarray(times)
    store.add([Series("n1", Resource.CPU, ts, np.linspace(10, 20, ts.shape[0]))])
    report = analysis.analyse(
        list(store.keys),
        store.columns,
        store.newest_by_series(),
        NOW,
        analysis.Thresholds(min_coverage=min_coverage),
    )
    return report.tags["n1"]


def test_a_single_sample_is_never_ok() -> None:
    tags = _tags([NOW])
    assert tags["quality"] == "low_coverage"
    assert tags["detail"] == {"cpu": "low_coverage"}


@pytest.mark.parametrize("count", [2, 5, 29])
def test_a_series_that_just_appeared_is_low_coverage_until_its_window_fills(count: int) -> None:
    assert _tags([NOW - 15.0 * k for k in range(count)][::-1])["quality"] == "low_coverage"


def test_a_full_window_is_ok_and_the_rule_can_be_turned_off() -> None:
    assert _tags([NOW - 15.0 * k for k in range(61)][::-1])["quality"] == "ok"
    assert _tags([NOW], min_coverage=0)["quality"] == "ok"
