"""Gone nodes, driven through the engine: a node that stops reporting is listed as gone in
health and on the status page for ``analysis.gone_visible_s`` once it has left /watcher,
and never counts as a bad node; an operator's forget lets one go at once, from the store,
the journal and every list.

A scripted provider stands in for the backend so that every cycle's time and samples are
exact; the journal is the real SQLite one.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.engine import Engine, EngineOptions
from loadwatcher.engine.gone import GoneNodes
from loadwatcher.http import statuspage
from loadwatcher.journal.sqlite import Journal
from loadwatcher.model import FetchResult, Resource, Series
from loadwatcher.pipeline import analysis
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.wire import formats
from loadwatcher.wire.formats import Format
from tests.support.fuzzing import examples

T0 = 1_700_000_000.0
NAMES = {Resource.CPU: "cpu", Resource.MEMORY: "memory"}
POLL_S, STALE_S, RETENTION_S, VISIBLE_S = 15.0, 60.0, 120.0, 600.0


class Scripted:
    """One sample per reporting node and resource at each poll's time; ``nodes`` is the set
    of nodes that report, changed by the test between cycles."""

    source = "Prometheus"

    def __init__(self, nodes: set[str]) -> None:
        self.nodes = nodes

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        ts = np.array([now])
        series = [
            Series(n, r, ts, np.array([10.0 + (now - T0) % 7]))
            for n in sorted(self.nodes)
            for r in NAMES
        ]
        return FetchResult(series=series)

    async def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def make(
    nodes: set[str],
    db: Path | None = None,
    visible_s: float = VISIBLE_S,
    retention_s: float = RETENTION_S,
) -> Engine:
    options = EngineOptions(
        poll_interval_s=POLL_S,
        retention_s=retention_s,
        thresholds=analysis.Thresholds(STALE_S, 0.0, 0.0),
        gone_visible_s=visible_s,
    )
    journal = Journal(str(db)) if db is not None else None
    return Engine(Scripted(set(nodes)), journal, options, NAMES, clock=Clock())


async def run_to(e: Engine, start: float, end: float) -> None:
    """Cycles every poll interval from ``start`` to ``end`` (both included)."""
    t = start
    while t <= end:
        assert isinstance(e.clock, Clock)
        e.clock.t = t
        await e.cycle(t)
        t += POLL_S


def served(e: Engine) -> set[str]:
    """The nodes of GET /watcher, as the scheduler reads them."""
    assert e.current is not None
    snap = e.current.snapshot
    doc = formats.document(snap, formats.pick_window(snap, None), Format.DEFAULT)
    return set(doc["data"]["NodeMetricsMap"] or {})


def gone_names(body: dict[str, Any]) -> list[str]:
    return [g["node"] for g in body["snapshot"]["goneNodes"]]


def provider(e: Engine) -> Scripted:
    assert isinstance(e.provider, Scripted)
    return e.provider


async def test_a_node_that_stops_reporting_is_listed_as_gone_once_it_left() -> None:
    e = make({"a", "b", "c"})
    await run_to(e, T0, T0 + 30)
    provider(e).nodes.discard("c")
    # Stale first: still served, a bad node (1 of 3 over the 10 % share: 503).
    await run_to(e, T0 + 45, T0 + 105)
    verdict = e.health(T0 + 105)
    assert "c" in served(e)
    assert verdict.body["snapshot"]["staleNodes"] == ["c"]
    assert not verdict.healthy
    assert gone_names(verdict.body) == []
    # Past the retention its samples are gone: it leaves /watcher and is listed as gone,
    # with its last sample, and is no bad node.
    await run_to(e, T0 + 120, T0 + 165)
    verdict = e.health(T0 + 165)
    assert "c" not in served(e)
    assert verdict.body["status"] == "ok", verdict.body
    assert verdict.body["badNodes"]["count"] == 0
    gone = verdict.body["snapshot"]["goneNodes"]
    assert [g["node"] for g in gone] == ["c"]
    assert gone[0]["lastSample"] == T0 + 30
    assert gone[0]["leftAt"] == T0 + 165
    assert gone[0]["reason"].startswith("no sample for 120 s")
    assert verdict.body["snapshot"]["goneNodeCount"] == 1
    assert any("gone" in n and "c" in n for n in verdict.body["notes"])
    # The status page shows it in its header.
    page = statuspage.render(
        e.current.snapshot if e.current else None, verdict.body, now=T0 + 165, refresh_s=15
    )
    assert 'id="gone"' in page and "c <span" in page
    # Listed for gone_visible_s after it left, then no more.
    await run_to(e, T0 + 180, T0 + 165 + VISIBLE_S)
    assert gone_names(e.health(T0 + 165 + VISIBLE_S).body) == ["c"]
    await run_to(e, T0 + 180 + VISIBLE_S, T0 + 180 + VISIBLE_S)
    body = e.health(T0 + 180 + VISIBLE_S).body
    assert gone_names(body) == []
    assert 'id="gone"' not in statuspage.render(
        e.current.snapshot if e.current else None, body, now=T0 + 180 + VISIBLE_S, refresh_s=15
    )


async def test_a_node_is_no_bad_node_from_the_moment_it_leaves_watcher() -> None:
    """With the default retention (17 min) past the longest window (15 min): between the
    two the node is not in /watcher, so it is gone, not stale."""
    e = make({"a", "b", "c"}, retention_s=1020.0)
    await run_to(e, T0, T0 + 30)
    provider(e).nodes.discard("c")
    await run_to(e, T0 + 45, T0 + 930)
    assert "c" in served(e) and not e.health(T0 + 930).healthy  # sample at T0+30 in window
    await run_to(e, T0 + 945, T0 + 945)
    assert any(node == "c" for node, _ in e.store.keys)  # still held: within the retention
    verdict = e.health(T0 + 945)
    assert "c" not in served(e)
    assert verdict.body["status"] == "ok", verdict.body
    assert gone_names(verdict.body) == ["c"]
    page = statuspage.render(
        e.current.snapshot if e.current else None, verdict.body, now=T0 + 945, refresh_s=15
    )
    assert 'id="gone"' in page
    await run_to(e, T0 + 960, T0 + 1200)  # past the retention too: still gone, not back
    assert gone_names(e.health(T0 + 1200).body) == ["c"]
    assert e.health(T0 + 1200).body["snapshot"]["goneNodes"][0]["leftAt"] == T0 + 945


async def test_a_gone_node_that_reports_again_is_no_longer_gone() -> None:
    e = make({"a", "c"})
    await run_to(e, T0, T0 + 15)
    provider(e).nodes.discard("c")
    await run_to(e, T0 + 30, T0 + 150)
    assert gone_names(e.health(T0 + 150).body) == ["c"]
    provider(e).nodes.add("c")
    await run_to(e, T0 + 165, T0 + 165)
    assert gone_names(e.health(T0 + 165).body) == []
    assert "c" in served(e)


async def test_gone_visible_s_zero_lists_nothing() -> None:
    e = make({"a", "c"}, visible_s=0.0)
    await run_to(e, T0, T0 + 15)
    provider(e).nodes.discard("c")
    await run_to(e, T0 + 30, T0 + 150)
    assert "c" not in served(e)
    assert gone_names(e.health(T0 + 150).body) == []


def in_file(db: Path) -> set[str]:
    """The nodes of the journal's series (a forgotten series' chunk rows stay until the
    retention trims them; without their series a restart cannot load them)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return {str(node) for _, node, _ in conn.execute("SELECT * FROM series")}


async def test_forget_lets_a_stale_node_go_at_once_from_store_journal_and_health(
    tmp_path: Path,
) -> None:
    """Three nodes, one of them reported once (a test push): 5 minutes later a third of
    the nodes is stale and health is 503; forgetting it turns health ok at once."""
    db = tmp_path / "lw.db"
    e = make({"a", "b", "test"}, db)
    await e.recover()
    await run_to(e, T0, T0)
    provider(e).nodes.discard("test")
    await run_to(e, T0 + 15, T0 + 90)
    before = e.health(T0 + 90)
    assert not before.healthy and before.body["snapshot"]["staleNodes"] == ["test"]
    assert "test" in in_file(db)
    assert await e.forget("test") is True
    after = e.health(T0 + 90)
    assert after.healthy and after.body["status"] == "ok", after.body
    assert after.body["badNodes"] == {"count": 0, "of": 2, "share": 0.0, "maxShare": 0.1}
    assert gone_names(after.body) == []
    assert "test" not in served(e)
    assert all(node != "test" for node, _ in e.store.keys)
    assert "test" not in in_file(db)
    # The next cycles neither bring it back nor list it as gone.
    await run_to(e, T0 + 105, T0 + 240)
    assert "test" not in served(e)
    assert gone_names(e.health(T0 + 240).body) == []
    # Nor does a restart on the same journal.
    await e.close()
    again = make({"a", "b"}, db)
    assert isinstance(again.clock, Clock)
    again.clock.t = T0 + 250
    await again.recover()
    assert again.current is not None and "test" not in served(again)
    await run_to(again, T0 + 255, T0 + 255)
    assert "test" not in served(again)
    assert gone_names(again.health(T0 + 255).body) == []
    await again.close()


async def test_forget_a_gone_node_removes_it_from_the_list() -> None:
    e = make({"a", "c"})
    await run_to(e, T0, T0 + 15)
    provider(e).nodes.discard("c")
    await run_to(e, T0 + 30, T0 + 150)
    assert gone_names(e.health(T0 + 150).body) == ["c"]
    assert await e.forget("c") is True
    assert gone_names(e.health(T0 + 150).body) == []
    assert await e.forget("c") is False  # once only


async def test_forget_an_unknown_node_changes_nothing() -> None:
    e = make({"a", "b"})
    await run_to(e, T0, T0 + 15)
    current = e.current
    assert await e.forget("nope") is False
    assert e.current is current


async def test_a_forgotten_node_that_reports_again_comes_back_as_a_new_node() -> None:
    e = make({"a", "b", "c"})
    await run_to(e, T0, T0 + 45)
    assert await e.forget("c") is True  # forgotten while it still reports
    assert "c" not in served(e)
    await run_to(e, T0 + 60, T0 + 60)
    assert "c" in served(e)
    assert e.current is not None
    # Only the sample since: the history before the forget is gone.
    sid = list(e.store.keys).index(("c", Resource.CPU))
    assert e.store.columns.ts[e.store.columns.sid == sid].tolist() == [T0 + 60]


async def test_forget_before_the_first_snapshot_drops_the_samples_only() -> None:
    e = make({"a"})
    assert await e.forget("a") is False
    assert e.current is None


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from("abcdefgh"), st.sampled_from(list(NAMES))), max_size=30),
    st.sets(st.sampled_from("abcdefgh")),
)
def test_store_forget_nodes_keeps_every_other_sample_in_order(
    keys: list[tuple[str, Resource]], forgotten: set[str]
) -> None:
    store = SampleStore()
    series = [
        Series(n, r, np.array([T0 + i, T0 + i + 1.0]), np.array([float(i), float(i) + 0.5]))
        for i, (n, r) in enumerate(dict.fromkeys(keys))
    ]
    store.add(series, keep_from=0.0, latest=T0 + 1000, clock=T0)
    before = {
        key: store.columns.ts[store.columns.sid == i].tolist() for i, key in enumerate(store.keys)
    }
    renumber = store.forget_nodes(forgotten)
    held = {node for node, _ in before}
    if not held & forgotten:
        assert renumber is None
    else:
        assert renumber is not None
        assert int((renumber < 0).sum()) == sum(1 for n, _ in before if n in forgotten)
    expected = [k for k in before if k[0] not in forgotten]
    assert store.keys == expected
    for i, key in enumerate(store.keys):
        assert store.columns.ts[store.columns.sid == i].tolist() == before[key]
        assert store.newest_of_node(key[0]) is not None
    assert len(store.columns) == sum(len(before[k]) for k in expected)


@given(
    st.lists(
        st.tuples(st.sets(st.sampled_from("abcdef")), st.floats(0, 100)), min_size=1, max_size=20
    )
)
def test_gone_list_is_those_that_left_within_visible_s_and_not_back(
    steps: list[tuple[set[str], float]],
) -> None:
    """Against a model: a node is listed iff it was in one snapshot, missing from a later
    one, is still missing now, and left at most ``visible_s`` ago."""
    visible = 120.0
    gone = GoneNodes(visible)
    before: dict[str, dict[str, Any]] = {}
    now = 0.0
    left: dict[str, float] = {}
    for nodes, step in steps:
        now += step
        after = {n: {"lastSample": now} for n in nodes}
        gone.observe(before, after, now, 60.0)
        for n in before:
            if n not in after:
                left[n] = now
        for n in after:
            left.pop(n, None)
        before = after
        listed, _ = gone.listed(now)
        model = {n for n, at in left.items() if now - at <= visible}
        names = [g.node for g in listed]
        assert set(names) == model
        assert [g.left_at for g in listed] == sorted((g.left_at for g in listed), reverse=True)
        assert not set(names) & nodes
        page, count = gone.listed(now, 3)
        assert page == listed[:3] and count == len(model)


def test_gone_list_is_bounded_keeping_the_last_to_leave() -> None:
    gone = GoneNodes(3600.0, limit=3)
    before: dict[str, dict[str, Any]] = {}
    for i in range(6):
        now = T0 + i
        after = {f"n{j}": {"lastSample": now} for j in range(i + 1, 6)}
        gone.observe(before, after, now, 60.0)
        before = after
    assert [g.node for g in gone.listed(T0 + 5)[0]] == ["n5", "n4", "n3"]


@pytest.mark.parametrize("last", [None, T0])
def test_gone_entry_json(last: float | None) -> None:
    gone = GoneNodes(60.0)
    gone.observe({"x": {} if last is None else {"lastSample": last}}, {}, T0 + 5, 900.0)
    (entry,), _ = gone.listed(T0 + 5)
    assert entry.as_json() == {
        "node": "x",
        "lastSample": last,
        "leftAt": T0 + 5,
        "reason": entry.reason,
    }


class Gated(Scripted):
    """A provider whose fetch waits until the test opens the gate."""

    def __init__(self, nodes: set[str]) -> None:
        super().__init__(nodes)
        self.gate = asyncio.Event()
        self.fetching = asyncio.Event()

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        self.fetching.set()
        await self.gate.wait()
        return await super().fetch(now, since)


async def test_a_forget_during_a_cycle_waits_for_it_and_wins() -> None:
    """The cycle in flight still reports the node; the forget, asked meanwhile, runs after
    it: the node is out of the store and of /watcher when both are done."""
    e = make({"a", "c"})
    await run_to(e, T0, T0 + 15)
    gated = Gated({"a", "c"})
    e.provider = gated
    assert isinstance(e.clock, Clock)
    e.clock.t = T0 + 30
    cycle = asyncio.create_task(e.cycle(T0 + 30))
    await gated.fetching.wait()
    forget = asyncio.create_task(e.forget("c"))
    await asyncio.sleep(0.05)
    assert not forget.done()  # held by the cycle's lock
    gated.gate.set()
    await cycle
    assert await forget is True
    assert "c" not in served(e)
    assert [n for n, _ in e.store.keys] == ["a", "a"]
    assert e.health(T0 + 30).body["status"] == "ok"
