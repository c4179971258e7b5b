"""The store replaces its columns one at a time in a merge or a trim: each old column goes
before the next is made, readers in other threads wait meanwhile, and a failure half-way
(out of memory) leaves an empty, consistent store that takes the samples again."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import pytest

from loadwatcher.model import Resource, Series
from loadwatcher.pipeline import merge
from loadwatcher.pipeline.store import SampleStore


def _store(nodes: int = 4, samples: int = 20) -> SampleStore:
    store = SampleStore()
    ts = np.arange(samples, dtype=np.float64) * 10.0
    store.add([Series(f"n{i}", Resource.CPU, ts, np.full(samples, 10.0 + i)) for i in range(nodes)])
    return store


def _poll(store: SampleStore, at: float) -> None:
    """One poll's samples, a sample a series, with the retention moving on by as much."""
    batch = [Series(f"n{i}", Resource.CPU, np.array([at]), np.array([50.0])) for i in range(4)]
    store.add(batch, keep_from=at - 190.0)


def test_each_old_column_goes_before_the_next_is_made(monkeypatch) -> None:
    store = _store()
    old = [weakref.ref(getattr(store.columns, name)) for name in ("sid", "ts", "val")]
    real = merge.Moves.column
    alive_at: list[list[bool]] = []

    def column(self: merge.Moves, name: str, src: Any) -> Any:
        gc.collect()
        alive_at.append([ref() is not None for ref in old])
        assert store.held() is None  # a reader in another thread waits
        return real(self, name, src)

    monkeypatch.setattr(merge.Moves, "column", column)
    _poll(store, 200.0)
    # Making the times, the old series ids are gone already; making the values, the times.
    assert alive_at == [[True, True, True], [False, True, True], [False, False, True]]
    held = store.held()
    assert held is not None
    assert len(held.cols.sid) == len(held.cols.ts) == len(held.cols.val) == 4 * 20
    assert held.cols.ts[19] == 200.0 and held.cols.ts[0] == 10.0  # one in, one out


@pytest.mark.parametrize("failing", ["sid", "ts", "val"])
def test_a_failure_half_way_leaves_an_empty_consistent_store(monkeypatch, failing: str) -> None:
    store = _store()
    real = merge.Moves.column

    def column(self: merge.Moves, name: str, src: Any) -> Any:
        if name == failing:
            raise MemoryError("no room for column")
        return real(self, name, src)

    monkeypatch.setattr(merge.Moves, "column", column)
    with pytest.raises(MemoryError):
        _poll(store, 200.0)
    held = store.held()
    assert held is not None
    assert len(held.cols.sid) == len(held.cols.ts) == len(held.cols.val) == 0
    assert store.newest() is None
    monkeypatch.setattr(merge.Moves, "column", real)
    # The next poll asks the retention again: what the store held is taken back.
    again = _store()
    store.add(
        [Series(f"n{i}", Resource.CPU, again.columns.ts[:20], np.full(20, 1.0)) for i in range(4)]
    )
    assert len(store.columns) == 4 * 20
    assert store.newest() == 190.0


def test_a_trim_replaces_the_columns_one_at_a_time(monkeypatch) -> None:
    store = _store()
    seen: list[bool] = []
    real = SampleStore._replace_columns

    def replacing(self: SampleStore, make: Any) -> None:
        def checked(name: str, column: Any) -> Any:
            seen.append(self.held() is None)
            return make(name, column)

        real(self, checked)

    monkeypatch.setattr(SampleStore, "_replace_columns", replacing)
    assert store.trim(100.0) == 4 * 10
    assert seen == [True, True, True]
    assert store.columns.ts.min() == 100.0
    assert len(store.columns.sid) == len(store.columns.val) == 4 * 10
