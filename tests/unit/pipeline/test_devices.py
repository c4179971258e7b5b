"""``devices``: a node's per-device series as its mean and its busiest, at each time any
device has a point (hypothesis over devices with gaps, repeats and any order)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.model import Resource, Series
from loadwatcher.pipeline.devices import devices
from tests.support.fuzzing import examples

device = st.dictionaries(st.integers(0, 20), st.floats(0, 100), min_size=1, max_size=8)


@settings(max_examples=examples(200), deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b"]), st.lists(device, min_size=1, max_size=4)))
def test_mean_and_busiest_at_every_time_a_device_reports(nodes: dict) -> None:
    given_series = [
        Series(
            node,
            Resource.GPU,
            np.array(list(points), float)[::-1],  # any order
            np.array(list(points.values()), float)[::-1],
        )
        for node, per_device in nodes.items()
        for points in per_device
    ]
    found = {(s.node, s.resource): s for s in devices(given_series)}
    assert set(found) == {(n, r) for n in nodes for r in (Resource.GPU, Resource.GPU_MAX)}
    for node, per_device in nodes.items():
        times = sorted({t for points in per_device for t in points})
        mean, most = found[(node, Resource.GPU)], found[(node, Resource.GPU_MAX)]
        assert mean.ts.tolist() == most.ts.tolist() == [float(t) for t in times]
        for k, t in enumerate(times):
            here = [points[t] for points in per_device if t in points]
            assert np.isclose(mean.values[k], sum(here) / len(here))
            assert most.values[k] == max(here)
