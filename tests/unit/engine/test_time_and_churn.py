"""Time, churn and back-off rules of the store and the engine, driven in-process.

A scripted provider stands in for a hostile or unlucky backend (timestamps ahead of the
clock, thousands of new node names per poll, 429 answers) so that every cycle's time and
samples are exact; the journal is the real SQLite one.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.engine import Engine, EngineOptions
from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.journal import codec
from loadwatcher.journal.sqlite import Journal
from loadwatcher.model import FetchResult, Resource, Series
from loadwatcher.pipeline.analysis import Quality, Thresholds
from loadwatcher.pipeline.store import SampleStore
from tests.support.fuzzing import examples

T0 = 1_700_000_000.0
NAMES = {Resource.CPU: "cpu", Resource.MEMORY: "memory"}
TEN_YEARS = 10 * 365 * 86400.0


def _cpu(node: str, ts: list[float], values: list[float] | None = None) -> Series:
    vals = values if values is not None else [10.0] * len(ts)
    return Series(node, Resource.CPU, np.array(ts, np.float64), np.array(vals, np.float64))


# --- the store -------------------------------------------------------------------------

# Rounds of (clock, {series: [(time offset from the clock, value)]}).
_rounds = st.lists(
    st.tuples(
        st.integers(0, 50),  # how far the clock moves (it may also stand still)
        st.dictionaries(
            st.integers(0, 5),
            st.lists(
                st.tuples(
                    st.sampled_from([-200, -30, -1, 0, 30, 59, 60, 61, 3600, TEN_YEARS]),
                    st.floats(0, 100),
                ),
                max_size=6,
            ),
            max_size=6,
        ),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=examples(200), deadline=None)
@given(_rounds)
def test_the_store_takes_exactly_the_samples_not_ahead_of_the_clock_and_newer_than_held(
    rounds: list[tuple[int, dict[int, list[tuple[float, float]]]]],
) -> None:
    """Against a model: a sample is kept iff it is at most ``latest`` and newer than every
    sample kept before for its series; one far-future sample never blocks later ones."""
    store = SampleStore()
    model: dict[str, dict[float, float]] = {}
    clock = T0
    for step, by_series in rounds:
        clock += step
        latest = clock + 60
        parts = []
        for sid, samples in sorted(by_series.items()):
            node = f"n{sid}"
            chosen: dict[float, float] = {}
            for offset, val in sorted(samples, key=lambda s: s[0]):
                chosen[clock + offset] = val
            ts = sorted(chosen)
            parts.append(_cpu(node, ts, [chosen[t] for t in ts]))
            newest = max(model.get(node, {}), default=-np.inf)
            for t in ts:
                if t <= latest and t > newest:
                    model.setdefault(node, {})[t] = chosen[t]
        result = store.add(parts, latest=latest, clock=clock)
        future = sum(int(t > latest) for p in parts for t in p.ts.tolist())
        assert result.dropped.get("future", 0) == future
    held: dict[str, dict[float, float]] = {}
    cols = store.columns
    for sid, t, v in zip(cols.sid.tolist(), cols.ts.tolist(), cols.val.tolist(), strict=True):
        held.setdefault(store.keys[sid][0], {})[t] = v
    assert held == {node: samples for node, samples in model.items() if samples}


def test_samples_the_clock_stepping_back_put_ahead_of_it_are_withdrawn() -> None:
    store = SampleStore()
    store.add([_cpu("a", [T0, T0 + 3600])], latest=T0 + 3600)
    assert store.forget_after(T0 + 60) == 1
    assert store.columns.ts.tolist() == [T0]
    added = store.add([_cpu("a", [T0 + 15])], latest=T0 + 60)
    assert added.added.ts.tolist() == [T0 + 15]  # not blocked by the withdrawn sample


def test_forgetting_idle_series_keeps_the_others_samples_under_new_ids() -> None:
    store = SampleStore()
    store.add([_cpu("old", [T0]), _cpu("a", [T0, T0 + 100], [1.0, 2.0]), _cpu("b", [T0])])
    store.add([_cpu("b", [T0 + 100], [3.0])])
    renumber = store.forget_idle(T0 + 50)
    assert renumber is not None and renumber.tolist() == [-1, 0, 1]
    assert store.keys == [("a", Resource.CPU), ("b", Resource.CPU)]
    cols = store.columns
    assert list(zip(cols.sid.tolist(), cols.ts.tolist(), cols.val.tolist(), strict=True)) == [
        (0, T0 + 100, 2.0),
        (1, T0 + 100, 3.0),
    ]
    assert store.forget_idle(T0 + 50) is None
    # A forgotten node that comes back is a new series, and its samples are taken.
    added = store.add([_cpu("old", [T0 + 120])])
    assert store.keys[-1] == ("old", Resource.CPU) and len(added.added) == 1


# --- the engine ------------------------------------------------------------------------


class Hostile:
    """One sample per node and resource at ``now + lead``; ``far`` nodes' samples are ten
    years ahead; ``error`` is raised instead when set; ``new_per_poll`` fresh node names
    join every poll (autoscaling) while the first ``nodes`` stay."""

    source = "Prometheus"

    def __init__(self, nodes: list[str]) -> None:
        self.nodes = nodes
        self.lead = 0.0
        self.far: set[str] = set()
        self.error: ProviderError | None = None
        self.new_per_poll = 0
        self.polls = 0

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        self.polls += 1
        if self.error is not None:
            raise self.error
        names = self.nodes + [f"spot-{self.polls}-{i}" for i in range(self.new_per_poll)]
        series = []
        for node in names:
            t = now + self.lead + (TEN_YEARS if node in self.far else 0.0)
            for r in NAMES:
                series.append(Series(node, r, np.array([t]), np.array([20.0 + self.polls % 7])))
        info = {node: {"capacity.cpu": "4"} for node in names}  # facts of every node, too
        return FetchResult(series=series, known_nodes=frozenset(self.nodes), node_info=info)

    async def close(self) -> None:
        pass


def _engine(
    db: Path | None,
    provider: Hostile,
    retention_s: float = 1020.0,
    clock: Callable[[], float] = lambda: T0,
    max_new_series: int = 50_000,
) -> Engine:
    options = EngineOptions(
        poll_interval_s=15.0,
        retention_s=retention_s,
        max_new_series=max_new_series,
        thresholds=Thresholds(min_coverage=0.0),  # a few polls are all these tests run
    )
    journal = Journal(str(db)) if db is not None else None
    return Engine(provider, journal, options, NAMES, clock=clock)


def _rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return list(conn.execute(sql).fetchall())


def _dropped(e: Engine, reason: str) -> float:
    return float(e.metrics.samples_dropped.labels(reason)._value.get())


async def test_one_sample_ten_years_ahead_is_dropped_and_blocks_nothing(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    provider = Hostile(["a", "b", "c"])
    e = _engine(db, provider)
    await e.recover()
    await e.cycle(T0)
    provider.far = {"b"}
    await e.cycle(T0 + 15)
    provider.far = set()
    await e.cycle(T0 + 30)
    assert _dropped(e, "future") == 2  # b's cpu and memory, once
    assert e.current is not None
    tags = e.current.snapshot.tags
    assert tags["b"]["quality"] == "ok" and tags["b"]["lastSample"] == int(T0 + 30)
    assert e.health(T0 + 30).status == "ok" and e.clock_skew is None
    await e.close()
    assert _rows(db, "SELECT max(ts_max) FROM chunks") == [(T0 + 30,)]


async def test_most_samples_ahead_is_a_clock_skew_its_nodes_not_ok(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    provider = Hostile([f"n{i}" for i in range(10)])
    e = _engine(db, provider)
    await e.recover()
    await e.cycle(T0)
    provider.lead = 3600.0  # the backend's clock is an hour ahead (or ours stepped back)
    await e.cycle(T0 + 15)
    verdict = e.health(T0 + 15)
    assert verdict.status == "unhealthy"
    assert any(
        r.startswith("clock skew: backend is 3600 s ahead") for r in verdict.body["serviceReasons"]
    )
    assert e.current is not None
    assert {t["quality"] for t in e.current.snapshot.tags.values()} == {"stale"}
    assert e.report.nodes(Quality.STALE) == tuple(f"n{i}" for i in range(10))
    assert _dropped(e, "future") == 20
    provider.lead = 0.0
    await e.cycle(T0 + 30)
    assert e.clock_skew is None and e.health(T0 + 30).status == "ok"
    assert {t["quality"] for t in e.current.snapshot.tags.values()} == {"ok"}
    await e.close()
    assert _rows(db, "SELECT max(ts_max) FROM chunks") == [(T0 + 30,)]  # none journalled


async def test_a_journal_written_before_the_rule_is_cleaned_on_load(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    e = _engine(db, Hostile(["a"]))
    await e.recover()
    await e.cycle(T0)
    await e.close()
    # What an older version journalled: a chunk mixing a good sample and one far ahead.
    with contextlib.closing(sqlite3.connect(db)) as conn:
        fid = np.array([0, 0], np.int64)
        conn.execute(
            codec.INSERT, codec.encode(fid, np.array([T0 + 5, T0 + TEN_YEARS]), np.full(2, 7.0))
        )
        conn.commit()
    again = _engine(db, Hostile(["a"]), clock=lambda: T0 + 10)
    await again.recover()
    cols = again.store.columns
    assert again.store.keys[0] == ("a", Resource.CPU)
    assert cols.ts[cols.sid == 0].tolist() == [T0, T0 + 5]
    assert again.health(T0 + 10).body["journal"]["error"] == "journal: 1 implausible sample dropped"
    assert _rows(db, "SELECT max(ts_max) FROM chunks") == [(T0 + 5,)]
    assert _rows(db, "SELECT sum(n) FROM chunks") == [(3,)]  # T0 twice, and the good one
    await again.close()


async def test_node_churn_leaves_memory_and_the_journal_flat(tmp_path: Path) -> None:
    """A thousand new node names per poll for 60 polls; the retention holds ten polls."""
    db = tmp_path / "lw.db"
    provider = Hostile(["stay"])
    provider.new_per_poll = 1000
    e = _engine(db, provider, retention_s=150.0)
    await e.recover()
    sizes = []
    for i in range(60):
        await e.cycle(T0 + 15 * i)
        sizes.append(len(e.store.keys))
    live = 2 * (1 + 1000 * 11)  # the retention's polls, both resources
    assert max(sizes) <= live * 17 / 16 + 2
    assert max(sizes[30:]) <= max(sizes[10:30])  # flat, not growing
    assert len(e.node_info) <= max(sizes) // 2 + 1  # the nodes' facts leave with them
    series_rows = _rows(db, "SELECT count(*) FROM series")[0][0]
    assert isinstance(series_rows, int) and series_rows <= max(sizes)
    assert ("stay", Resource.CPU) in e.store.keys
    assert e.current is not None and "stay" in e.current.snapshot.nodes
    ids = {int(str(r[0])) for r in _rows(db, "SELECT id FROM series")}
    await e.close()
    # A restart neither reuses an id an old chunk may hold nor loses the nodes still live.
    again = _engine(db, Hostile(["stay"]), retention_s=150.0, clock=lambda: T0 + 15 * 59)
    await again.recover()
    assert again.journal is not None
    assert again.journal.ids.next_id > max(ids)
    assert len(again.store.keys) == series_rows
    await again.close()


async def test_a_forgotten_node_that_comes_back_is_journalled_again(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    provider = Hostile(["a", "b"])
    e = _engine(db, provider, retention_s=60.0)
    await e.recover()
    await e.cycle(T0)
    provider.nodes = ["a"]
    for i in range(1, 7):
        await e.cycle(T0 + 15 * i)
    assert ("b", Resource.CPU) not in e.store.keys
    assert _rows(db, "SELECT count(*) FROM series WHERE node = 'b'") == [(0,)]
    provider.nodes = ["a", "b"]
    await e.cycle(T0 + 105)
    await e.close()
    again = _engine(db, Hostile(["a", "b"]), retention_s=60.0, clock=lambda: T0 + 110)
    await again.recover()
    held = {again.store.keys[s][0] for s in again.store.columns.sid.tolist()}
    assert held == {"a", "b"}
    await again.close()


async def test_a_poll_adding_too_many_series_fails_and_the_last_snapshot_stays() -> None:
    provider = Hostile([f"n{i}" for i in range(5)])
    e = _engine(None, provider, max_new_series=20)
    await e.cycle(T0)
    assert e.current is not None and len(e.current.snapshot.nodes) == 5
    provider.new_per_poll = 30  # 60 new series
    await e.cycle(T0 + 15)
    verdict = e.health(T0 + 15)
    assert verdict.status == "unhealthy"
    assert verdict.body["provider"]["errorKind"] == "too_large"
    assert "provider.max_new_series (20)" in verdict.body["provider"]["error"]
    assert len(e.current.snapshot.nodes) == 5 and len(e.store.keys) == 10


async def test_retry_after_delays_the_next_poll_within_the_staleness_limit() -> None:
    provider = Hostile(["a"])
    clock = [T0]
    e = _engine(None, provider, clock=lambda: clock[0])
    await e.cycle()
    assert e.next_poll_delay(1.0) == 14.0
    provider.error = ProviderError(
        ProviderErrorKind.RATE_LIMITED, "x answered 429", retry_after_s=120.0
    )
    clock[0] = T0 + 15
    await e.cycle()
    assert e.next_poll_delay(1.0) == 120.0
    reasons = e.health().body["serviceReasons"]
    assert "backing off as the provider asked (Retry-After): next poll in 120 s" in reasons
    provider.error = ProviderError(
        ProviderErrorKind.SERVER, "x answered 503", retry_after_s=86400.0
    )
    clock[0] = T0 + 135
    await e.cycle()
    assert e.next_poll_delay(0.0) == 300.0 - 15.0  # before the nodes would go stale
    provider.error = None
    clock[0] = T0 + 420
    await e.cycle()
    assert e.next_poll_delay(1.0) == 14.0
    assert not any("backing off" in r for r in e.health().body["reasons"])
