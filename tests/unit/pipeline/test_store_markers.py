"""Staleness markers in the sample store: held beside the samples and never one of them,
under the retention, the clock and the renumbering as the samples are, and back from the
real journal as they went in.

The marker is written here from its bits, not taken from the package: the payload is
Prometheus's, and the store must tell it from every other NaN.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.journal.sqlite import Journal
from loadwatcher.model import Resource, Series
from loadwatcher.pipeline.store import SampleStore
from tests.support.fuzzing import examples

STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0_0000_0000_0002))[0]
NODES = ["a", "b", "c", "d"]

# (node, time, a marker?, value): few times, so that they repeat across adds.
entry = st.tuples(st.integers(0, 3), st.integers(0, 40), st.booleans(), st.floats(0, 100))
adds = st.lists(st.lists(entry, max_size=10), min_size=1, max_size=6)


def parts(add: list[tuple[int, int, bool, float]], markers: bool = True) -> list[Series]:
    out = []
    for n, node in enumerate(NODES):
        mine = [(float(t), STALE if m else v) for i, t, m, v in add if i == n if markers or not m]
        if mine:
            ts, vals = zip(*mine, strict=True)
            out.append(Series(node, Resource.CPU, np.array(ts), np.array(vals)))
    return out


def held_samples(store: SampleStore) -> dict[tuple[str, float], float]:
    cols = store.columns
    return {
        (store.keys[s][0], t): v
        for s, t, v in zip(cols.sid.tolist(), cols.ts.tolist(), cols.val.tolist(), strict=True)
    }


def held_ends(store: SampleStore) -> set[tuple[str, float]]:
    ends = store.ends
    pairs = list(zip(ends.sid.tolist(), ends.ts.tolist(), strict=True))
    assert pairs == sorted(pairs), "(series, time) order"
    assert len(set(pairs)) == len(pairs), "one marker per (series, time)"
    return {(store.keys[s][0], t) for s, t in pairs}


def fed(batches: list[list[tuple[int, int, bool, float]]], keep_from: float) -> SampleStore:
    store = SampleStore()
    for add in batches:
        store.add(parts(add), keep_from=keep_from, latest=35.0, keep_older=True)
    return store


@settings(max_examples=examples(200), deadline=None)
@given(adds, st.integers(0, 20))
def test_markers_are_held_beside_the_samples_and_change_none(batches, keep_from) -> None:
    store, plain = SampleStore(), SampleStore()
    want: set[tuple[str, float]] = set()
    for add in batches:
        store.add(parts(add), keep_from=keep_from, latest=35.0, keep_older=True)
        plain.add(parts(add, markers=False), keep_from=keep_from, latest=35.0, keep_older=True)
        samples = held_samples(plain)
        # A time holds a sample or a marker: a marker yields to a sample, given or held.
        want = {end for end in want if end not in samples and end[1] >= keep_from}
        want |= {
            (NODES[i], float(t))
            for i, t, m, _ in add
            if m and keep_from <= t <= 35 and (NODES[i], float(t)) not in samples
        }
        assert held_samples(store) == samples
        assert held_ends(store) == want
    assert not np.isnan(store.columns.val).any()


@settings(max_examples=examples(200), deadline=None)
@given(adds, st.integers(0, 40), st.integers(0, 40))
def test_markers_follow_the_retention_the_clock_and_the_renumbering(
    batches, idle_before, latest
) -> None:
    store = fed(batches, 0.0)
    before = held_ends(store)
    store.forget_after(float(latest))
    before = {(n, t) for n, t in before if t <= latest}
    assert held_ends(store) == before
    # Series without a sample since then go, and when some do, everything older too.
    renumber = store.forget_idle(float(idle_before))
    alive = {node for node, _ in store.keys}
    kept_from = idle_before if renumber is not None else 0
    assert held_ends(store) == {(n, t) for n, t in before if n in alive and t >= kept_from}
    store.trim(float(idle_before + 5))
    assert held_ends(store) == {(n, t) for n, t in before if n in alive and t >= idle_before + 5}


def test_a_repeated_marker_is_counted_as_a_repeat_and_a_future_one_refused() -> None:
    store = SampleStore()
    first = store.add(parts([(0, 10, True, 0.0)]), latest=35.0, keep_older=True)
    again = store.add(parts([(0, 10, True, 0.0), (0, 50, True, 0.0)]), latest=35.0)
    assert len(first.added) == 1 and first.repeated == 0
    assert len(again.added) == 0 and again.repeated == 1
    assert again.dropped["future"] == 1
    assert held_ends(store) == {("a", 10.0)}


def test_a_marker_at_a_time_the_series_has_a_sample_is_a_repeat() -> None:
    """As Prometheus refuses a second sample for a time: the sample stands, and the journal
    (which keeps the last written of a time) never has to choose."""
    store = SampleStore()
    store.add(parts([(0, 10, False, 40.0)]), latest=35.0)
    held = store.add(parts([(0, 10, True, 0.0)]), latest=35.0, keep_older=True)
    given = store.add(parts([(1, 12, False, 30.0), (1, 12, True, 0.0)]), latest=35.0)
    assert held.repeated == given.repeated == 1
    assert held_ends(store) == set()
    assert held_samples(store) == {("a", 10.0): 40.0, ("b", 12.0): 30.0}


@settings(max_examples=examples(25), deadline=None)
@given(adds)
def test_markers_come_back_from_the_journal(tmp_path_factory, batches) -> None:
    db = tmp_path_factory.mktemp("markers") / "lw.db"

    async def round_trip() -> SampleStore:
        store = SampleStore()
        journal = Journal(str(db))
        await journal.open()
        for add in batches:
            added = store.add(parts(add), keep_from=0.0, latest=35.0, keep_older=True).added
            await journal.write_cycle(list(store.keys), added, -1.0, b"", 0.0)
        await journal.close()
        journal = Journal(str(db))
        await journal.open()
        stored = await journal.load_samples(-np.inf)
        await journal.close()
        back = SampleStore()
        back.load(stored.keys, stored.samples, stored.markers)
        assert held_ends(back) == held_ends(store)
        assert held_samples(back) == held_samples(store)
        return back

    asyncio.run(round_trip())


def test_a_marker_read_back_is_no_implausible_sample(tmp_path: Path) -> None:
    """The journal's read screens what a faulty writer left: a marker is not that."""
    refused: list[Any] = []

    async def go() -> None:
        store = SampleStore()
        journal = Journal(str(tmp_path / "lw.db"))
        await journal.open()
        added = store.add(parts([(0, 5, False, 40.0), (0, 9, True, 0.0)]), latest=35.0).added
        await journal.write_cycle(list(store.keys), added, -1.0, b"", 0.0)
        await journal.close()
        journal = Journal(str(tmp_path / "lw.db"))
        journal.on_refused = refused.append
        await journal.open()
        stored = await journal.load_samples(-np.inf)
        await journal.close()
        assert (len(stored.samples), len(stored.markers)) == (1, 1)

    asyncio.run(go())
    assert [r.implausible for r in refused] == [0]
