"""A snapshot's shorter windows, computed on first read: what they hold is the samples of
the snapshot's moment, whatever the store took since and in whatever order they are read,
computed once however many threads ask, and the samples are let go once all are done."""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.model import WINDOWS, Operator, Resource, Series, Window
from loadwatcher.pipeline import rollups, snapshot
from loadwatcher.pipeline.store import SampleStore
from tests.support.fuzzing import examples

NOW = 2000.0
NAMES = {Resource.CPU: "cpu", Resource.MEMORY: "mem"}


def _store(history: list[list[tuple[int, float]]]) -> SampleStore:
    store = SampleStore()
    for i, points in enumerate(history):
        by_ts = dict(points)
        ts = np.array(sorted(by_ts), np.float64)
        store.add([Series(f"n{i}", Resource.CPU, ts, np.array([by_ts[int(t)] for t in ts]))])
    return store


def _expected(store: SampleStore, name: str, end: float) -> dict[tuple[str, str], float]:
    """Per (node, operator), numpy's figures over the samples held now (the oracle)."""
    window = next(w for w in WINDOWS if w.name == name)
    cols, out = store.columns, {}
    for sid, (node, _) in enumerate(store.keys):
        inside = (cols.sid == sid) & (cols.ts >= end - window.seconds) & (cols.ts <= end)
        v = cols.val[inside]
        if v.size:
            out[(node, "AVG")] = float(v.mean())
            out[(node, "MAX")] = float(v.max())
            out[(node, "P90")] = float(np.percentile(v, 90))
            out[(node, "Latest")] = float(v[-1])
    return out


def _served(snap: snapshot.RollupSnapshot, name: str) -> dict[tuple[str, str], float]:
    stats = snap.windows[name]
    ops = (Operator.AVG, Operator.MAX, Operator.P90, Operator.LATEST)
    return {
        (snap.keys[sid][0], str(op)): float(stats.values[op][row])
        for row, sid in enumerate(stats.sids.tolist())
        for op in ops
    }


def _close(a: dict[tuple[str, str], float], b: dict[tuple[str, str], float]) -> bool:
    return a.keys() == b.keys() and all(abs(a[k] - b[k]) <= 1e-9 * max(1.0, abs(b[k])) for k in a)


history = st.lists(
    st.lists(st.tuples(st.integers(900, 2000), st.floats(0, 100)), min_size=1, max_size=30),
    min_size=1,
    max_size=5,
)


def test_only_the_longest_window_is_computed_with_the_snapshot() -> None:
    store = _store([[(t, t % 7 * 10.0) for t in range(1000, 2001, 15)]])
    snap = snapshot.build(store.columns, list(store.keys), NOW, "test", NAMES, {}, {})
    assert snap.windows.computed() == {"15m"}  # type: ignore[attr-defined]
    assert "5m" in snap.windows and "1h" not in snap.windows  # asking costs nothing
    assert snap.windows.computed() == {"15m"}  # type: ignore[attr-defined]
    assert list(snap.windows) == [w.name for w in WINDOWS]
    assert _close(_served(snap, "5m"), _expected(store, "5m", NOW))
    assert snap.windows.computed() == {"15m", "5m"}  # type: ignore[attr-defined]


@settings(max_examples=examples(100), deadline=None)
@given(
    history,
    history,
    st.permutations([w.name for w in WINDOWS]),
    st.sampled_from(["newer", "trim", "forget"]),
)
def test_a_window_read_late_holds_the_snapshots_samples(
    first: list[list[tuple[int, float]]],
    later: list[list[tuple[int, float]]],
    order: list[str],
    change: str,
) -> None:
    """Whatever the store takes or forgets between the snapshot and the first read of a
    window, and in whatever order the windows are read, each is that of the samples held
    at the snapshot's time."""
    store = _store(first)
    expected = {w.name: _expected(store, w.name, NOW) for w in WINDOWS}
    snap = snapshot.build(store.columns, list(store.keys), NOW, "test", NAMES, {}, {})
    if change == "newer":  # the next cycles' samples, some within the windows' end
        for i, points in enumerate(later):
            by_ts = {t + 500: v for t, v in points}
            ts = np.array(sorted(by_ts), np.float64)
            values = np.array([by_ts[int(t)] for t in ts])
            store.add([Series(f"n{i}", Resource.CPU, ts, values)], keep_from=NOW - 600)
    elif change == "trim":
        store.trim(NOW - 100)
    else:
        store.forget_idle(NOW + 1)  # every series forgotten, the rest renumbered
    for name in order:
        assert _close(_served(snap, name), expected[name]), name


def test_concurrent_first_readers_compute_a_window_once(monkeypatch) -> None:
    store = _store([[(t, float(t % 50)) for t in range(1000, 2001, 10)] for _ in range(50)])
    snap = snapshot.build(store.columns, list(store.keys), NOW, "test", NAMES, {}, {})
    calls: list[str] = []
    real = rollups.window_stats
    started = threading.Barrier(8)

    def counted(lay: rollups.Layout, window: Window) -> rollups.WindowStats:
        calls.append(window.name)
        return real(lay, window)

    monkeypatch.setattr(rollups, "window_stats", counted)
    got: list[rollups.WindowStats] = []

    def read() -> None:
        started.wait()
        got.append(snap.windows["10m"])

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["10m"]
    assert len(got) == 8 and all(stats is got[0] for stats in got)


def test_the_samples_are_let_go_once_every_window_is_computed() -> None:
    store = _store([[(t, float(t % 9)) for t in range(1000, 2001, 15)] for _ in range(3)])
    snap = snapshot.build(store.columns, list(store.keys), NOW, "test", NAMES, {}, {})
    values = weakref.ref(store.columns.val)
    store.add([Series("n0", Resource.CPU, np.array([2010.0]), np.array([1.0]))])  # replaced
    gc.collect()
    assert values() is not None  # the shorter windows are still to be computed from them
    snap.windows["5m"]
    gc.collect()
    assert values() is not None
    snap.windows["10m"]
    gc.collect()
    assert values() is None
