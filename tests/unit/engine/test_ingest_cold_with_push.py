"""A cold start that receives pushes in its first cycle: the poll's retention comes in
slices, merged one at a time (``add_in_turn``), and the pushed samples beside them are
still every one taken or counted, whichever source a node ends up with. Drawn: how many
slices, which nodes are pushed, where the pushed samples fall against the polled ones."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.engine.ingest import ingest
from loadwatcher.engine.pushed import SourceSplit
from loadwatcher.model import FetchResult, Resource, Series, SeriesBatch
from loadwatcher.pipeline.store import SampleStore
from tests.support.fuzzing import examples

NOW = 1_700_000_000.0
NODES = ["a", "b", "c"]


def _slice(start: float, end: float) -> SeriesBatch:
    """Every node's CPU every 15 s in ``[start, end)``, value 1."""
    ts = np.arange(start, end, 15.0)
    return SeriesBatch.of([Series(n, Resource.CPU, ts, np.ones(ts.shape[0])) for n in NODES])


@settings(max_examples=examples(150), deadline=None)
@given(
    st.integers(2, 5),
    st.sets(st.sampled_from(NODES), min_size=1),
    st.sets(st.integers(-900, 0), min_size=1, max_size=4),
    st.booleans(),
)
def test_every_polled_and_pushed_sample_is_taken_or_counted(
    slices: int, pushed_nodes: set[str], pushed_at: set[int], mixed: bool
) -> None:
    edges = np.linspace(NOW - 900, NOW + 15, slices + 1)
    polled = [_slice(a, b) for a, b in pairwise(edges.tolist())]
    offered_polled = sum(int(b.ts.shape[0]) for b in polled)
    times = np.array(sorted(NOW + t for t in pushed_at))
    pushed = SeriesBatch.of(
        [Series(n, Resource.CPU, times, np.full(times.shape[0], 2.0)) for n in sorted(pushed_nodes)]
    )
    result = FetchResult(batches=[*polled, pushed], pushed=1)
    store = SampleStore()
    sources = SourceSplit(45.0) if mixed else None

    ingested = ingest(store, result, NOW, keep_from=NOW - 1020, latest=NOW + 60, sources=sources)

    assert len(result.batches) == 1 and result.batches[0] is pushed  # slices went as merged
    assert ingested.pushed is not None
    # Pushed samples: each taken, or counted (a time the poll gave too: a duplicate).
    assert ingested.pushed.offered == len(pushed_nodes) * times.shape[0]
    assert len(ingested.pushed.added) + ingested.pushed.repeated == ingested.pushed.offered
    # Polled samples: each taken, or set apart for a pushed node (mixed mode only).
    polled_taken = len(ingested.result.added) - len(ingested.pushed.added)
    assert polled_taken + ingested.other_source == offered_polled
    assert ingested.other_source == 0 or mixed
    # What the store holds: every polled time, and every pushed time, once per series.
    held = {
        (store.keys[s][0], t)
        for s, t in zip(store.columns.sid.tolist(), store.columns.ts.tolist(), strict=True)
    }
    assert len(held) == len(store.columns)
    want = {(n, t) for b in polled for n, t in _pairs(b)} | {(n, t) for n, t in _pairs(pushed)}
    if mixed:  # a pushed node's polled samples after its cold start (none held: all) go
        want -= {(n, t) for b in polled for n, t in _pairs(b) if n in pushed_nodes}
        want |= {(n, t) for n, t in _pairs(pushed)}
    assert held == want


def _pairs(batch: SeriesBatch) -> list[tuple[str, float]]:
    nodes = np.repeat([node for node, _ in batch.keys], batch.lengths).tolist()
    return list(zip(nodes, batch.ts.tolist(), strict=True))
