"""A poll refused by provider.max_new_series beside pushed samples: the pushed samples go
on alone, and the backend's node list stands (a refused poll does not bring nodes the list
left out back to /watcher for a cycle)."""

from __future__ import annotations

import numpy as np

from loadwatcher.engine.ingest import cap_new_series
from loadwatcher.model import FetchResult, Resource, Series, SeriesBatch
from loadwatcher.pipeline.store import SampleStore


def _series(node: str) -> Series:
    return Series(node, Resource.CPU, np.array([100.0]), np.array([10.0]))


def test_the_node_list_survives_a_refused_poll_beside_pushes() -> None:
    polled = SeriesBatch.of([_series(f"polled-{i}") for i in range(5)])
    pushed = SeriesBatch.of([_series("pushed")])
    members = frozenset({"polled-0", "pushed"})
    result = FetchResult(batches=[polled, pushed], pushed=1, members=members)
    kept = cap_new_series(SampleStore(), result, 2)
    assert isinstance(kept, FetchResult)
    assert kept.batches == [pushed] and kept.pushed == 1 and kept.errors
    assert kept.members == members
