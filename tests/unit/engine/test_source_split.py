"""``SourceSplit`` (push beside a poller: one source per node) against the rule it states,
over drawn sequences of cycles: a node is the pushers' from the cycle that first pushes it
until ``hold_s`` passes without a push, or an operator releases it; while it is, the
poll's samples of it newer than what the store held of it when pushes took it are set
apart (counted, and kept in ``other``), and every other polled sample is kept. Polled
samples come as per-series ``Series`` (InfluxDB, metrics-server) or as ``SeriesBatch``
(Prometheus) alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.engine.pushed import SourceSplit
from loadwatcher.model import Resource, Series, SeriesBatch
from tests.support.fuzzing import examples

NODES = ["a", "b", "c", "d"]
HOLD_S = 45.0
STEP_S = 15.0

cycle = st.fixed_dictionaries(
    {
        "pushed": st.sets(st.sampled_from(NODES)),
        "released": st.sets(st.sampled_from(NODES), max_size=1),
        # Per node, polled samples at offsets (s) before the cycle's time.
        "polled": st.dictionaries(
            st.sampled_from(NODES), st.sets(st.integers(0, 120), min_size=1, max_size=4)
        ),
        "as_batch": st.booleans(),
    }
)


class Model:
    """The rule, written plainly."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self.seen: dict[str, float] = {}

    def claim(self, pushed: set[str], now: float, held: dict[str, float]) -> None:
        for node in pushed:
            self.first.setdefault(node, held.get(node, -np.inf))
            self.seen[node] = now
        for node in [n for n, at in self.seen.items() if now - at > HOLD_S]:
            del self.first[node], self.seen[node]

    def release(self, nodes: set[str]) -> None:
        for node in nodes:
            self.first.pop(node, None)
            self.seen.pop(node, None)

    def apart(self, node: str, ts: float) -> bool:
        return node in self.first and ts > self.first[node]


def _polled(
    polled: dict[str, set[int]], now: float, as_batch: bool
) -> tuple[list[Series], list[SeriesBatch]]:
    series = [
        Series(
            node, Resource.CPU, np.array(sorted(now - o for o in offsets)), np.ones(len(offsets))
        )
        for node, offsets in sorted(polled.items())
    ]
    if as_batch:
        return [], ([SeriesBatch.of(series)] if series else [])
    return series, []


def _samples(parts: Sequence[Series | SeriesBatch]) -> list[tuple[str, float]]:
    """Every sample of ``parts`` as (node, time), sorted."""
    batch = SeriesBatch.joined(parts)
    nodes = np.repeat([node for node, _ in batch.keys], batch.lengths).tolist()
    return sorted(zip(nodes, batch.ts.tolist(), strict=True))


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(cycle, min_size=1, max_size=8),
    st.dictionaries(st.sampled_from(NODES), st.integers(0, 300)),
)
def test_the_poll_keeps_a_nodes_samples_until_pushes_take_it(
    cycles: list[dict[str, Any]], held_ago: dict[str, int]
) -> None:
    split, model = SourceSplit(HOLD_S), Model()
    start = 1_700_000_000.0
    held = {node: start - ago for node, ago in held_ago.items()}  # the store's newest
    for k, c in enumerate(cycles):
        now = start + STEP_S * k
        pushed = [
            SeriesBatch.of([Series(n, Resource.CPU, np.array([now]), np.ones(1))])
            for n in sorted(c["pushed"])
        ]
        split.claim(pushed, now, held.get)
        model.claim(c["pushed"], now, held)
        split.release(c["released"])
        model.release(c["released"])
        assert split.pushed_nodes == frozenset(model.first)

        series, batches = _polled(c["polled"], now, c["as_batch"])
        given_samples = _samples([*series, *batches])
        kept_series, kept_batches, diverted = split.divert(series, batches, now - 1020.0, now)
        kept = _samples([*kept_series, *kept_batches])
        apart = [(node, t) for node, t in given_samples if model.apart(node, t)]
        assert kept == sorted(s for s in given_samples if s not in apart)
        assert diverted == len(apart)
        assert not (kept_series and c["as_batch"]) and not (kept_batches and not c["as_batch"])


def test_samples_set_apart_are_kept_in_other_and_trimmed_with_the_retention() -> None:
    split = SourceSplit(HOLD_S)
    now = 1_700_000_000.0
    split.claim(
        [SeriesBatch.of([Series("a", Resource.CPU, np.array([now]), np.ones(1))])],
        now,
        {"a": now - 60}.get,
    )
    polled = [
        Series("a", Resource.CPU, np.array([now - 90, now - 30, now]), np.array([1.0, 2.0, 3.0]))
    ]
    kept, _, diverted = split.divert(polled, [], now - 1020.0, now)
    assert diverted == 2 and kept[0].ts.tolist() == [now - 90]
    assert len(split.other.columns) == 2
    split.trim(now + 1020.0 - 10)  # past the retention of both: the series goes too
    assert len(split.other.columns) == 0 and not split.other.keys
