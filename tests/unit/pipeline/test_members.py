"""Serving through a node list: exactly the listed nodes' series and samples, renumbered in
order; a snapshot rebuilt from the journal serves the nodes it had tagged, not a node the
list had left out though its samples are in the file."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from loadwatcher.model import Columns, Resource
from loadwatcher.pipeline.members import listed_only
from loadwatcher.pipeline.snapshot import SnapshotWithoutWindows

NODES = ["a", "b", "c", "d"]


@given(
    st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(list(Resource))), unique=True),
    st.lists(st.tuples(st.integers(0, 30), st.floats(0, 100)), max_size=60),
    st.one_of(st.none(), st.frozensets(st.sampled_from([*NODES, "z"]))),
)
def test_only_listed_series_are_kept_in_order(
    keys: list[tuple[str, Resource]],
    raw: list[tuple[int, float]],
    members: frozenset[str] | None,
) -> None:
    n = len(keys)
    sid = np.array([i % n for i, _ in raw] if n else [], np.int32)
    cols = Columns(
        sid,
        np.array([float(t) for t, _ in raw][: len(sid)]),
        np.array([v for _, v in raw][: len(sid)]),
    )
    newest = np.arange(n, dtype=np.float64)
    view = listed_only(keys, cols, newest, members)
    expected = [k for k in keys if members is None or k[0] in members]
    assert view.keys == expected
    assert set(view.left) == {k[0] for k in keys} - {k[0] for k in expected}
    assert view.columns.sid.dtype == cols.sid.dtype
    got = sorted(
        (view.keys[s], t, v)
        for s, t, v in zip(
            view.columns.sid.tolist(),
            view.columns.ts.tolist(),
            view.columns.val.tolist(),
            strict=True,
        )
    )
    want = sorted(
        (keys[s], t, v)
        for s, t, v in zip(cols.sid.tolist(), cols.ts.tolist(), cols.val.tolist(), strict=True)
        if members is None or keys[s][0] in members
    )
    assert got == want
    assert view.newest.tolist() == [float(keys.index(k)) for k in expected]


def test_a_rebuilt_snapshot_serves_only_the_tagged_nodes() -> None:
    keys = [("a", Resource.CPU), ("left", Resource.CPU)]
    now = 10_000.0
    cols = Columns(
        np.array([0, 1], np.int32), np.array([now - 30, now - 30]), np.array([10.0, 20.0])
    )
    saved = SnapshotWithoutWindows(now, "Prometheus", {}, {"a": {"quality": "ok"}}, {})
    assert saved.build(cols, keys).nodes == {"a"}
