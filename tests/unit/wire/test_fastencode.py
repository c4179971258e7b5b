"""fastencode: the same bytes as orjson encoding ``formats.document``, for every body shape."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.model import WINDOWS, WIRE_OPERATORS, Resource
from loadwatcher.pipeline.rollups import WindowStats
from loadwatcher.pipeline.snapshot import RollupSnapshot
from loadwatcher.wire import fastencode, formats
from loadwatcher.wire.formats import Format
from tests.support.fuzzing import examples

# Values whose text orjson writes in its own way (exponents, -0.0, null for NaN).
AWKWARD = [0.0, -0.0, 1e-7, 1e-5, 5e-324, 1e16, 1.5e300, 23.456000000000003, 100.0, math.nan]


def snapshot_of(
    keys: list[tuple[str, Resource]],
    values: np.ndarray,
    present: list[int] | None = None,
    *,
    source: str = "Prometheus",
    metric_names: dict[Resource, str] | None = None,
    tags: dict[str, dict[str, Any]] | None = None,
    node_info: dict[str, dict[str, str]] | None = None,
) -> RollupSnapshot:
    """A snapshot whose every window holds ``values[i]`` (one row per wire operator) for
    series ``present[i]`` (all series when None)."""
    sids = np.asarray(present if present is not None else range(len(keys)), np.int64)
    windows = {
        w.name: WindowStats(
            window=w,
            start=1_700_000_000 - w.seconds,
            end=1_700_000_000,
            sids=sids,
            count=np.full(sids.size, 60, np.int64),
            newest=np.full(sids.size, 1_699_999_990.0),
            values={op: values[:, k].astype(np.float64) for k, op in enumerate(WIRE_OPERATORS)},
        )
        for w in WINDOWS
    }
    return RollupSnapshot(
        taken_at=1_700_000_000.7,
        source=source,
        keys=tuple(keys),
        windows=windows,
        metric_names=metric_names or {Resource.CPU: "cpu:ratio"},
        tags=tags or {},
        node_info=node_info or {},
    )


def assert_same_bytes(snap: RollupSnapshot, only: str | None = None) -> None:
    for window in (w.name for w in WINDOWS):
        for fmt in Format:
            doc = formats.document(snap, window, fmt, only=only)
            got = fastencode.encode(snap, window, fmt, only=only)
            nodes = doc["data"]["NodeMetricsMap"] if fmt is Format.DEFAULT else doc["data"]
            if only is not None and not nodes:
                assert got is None
            else:
                assert got == formats.encode(doc), (window, fmt, only)


def test_awkward_values_names_tags_and_metadata() -> None:
    keys = [
        ("node-b", Resource.MEMORY),  # series ids out of wire order
        ("node-a", Resource.MEMORY),
        ('quote"\\node', Resource.CPU),
        ("node-a", Resource.CPU),
        ("nœud-é", Resource.DISK),
        ("node-b", Resource.ENERGY),
    ]
    rows = len(keys)
    values = np.resize(np.asarray(AWKWARD), (rows, len(WIRE_OPERATORS)))
    snap = snapshot_of(
        keys,
        values,
        source='Influx "2"',
        metric_names={Resource.CPU: 'cpu "busy"', Resource.MEMORY: "mem\u2028used"},
        tags={"node-a": {"quality": "ok", "lastSample": 1699999990, "detail": {"cpu": "ok"}}},
        node_info={
            "node-b": {"capacity_cpu": "4", "dataCenter": "eu-1"},
            "nœud-é": {"allocatable_memory": "8Gi"},
        },
    )
    assert_same_bytes(snap)
    for node in ("node-a", "node-b", 'quote"\\node', "nœud-é", "absent"):
        assert_same_bytes(snap, only=node)


def test_empty_window_and_a_subset_of_series() -> None:
    keys = [("a", Resource.CPU), ("b", Resource.CPU), ("c", Resource.MEMORY)]
    empty = snapshot_of(keys, np.zeros((0, len(WIRE_OPERATORS))), present=[])
    assert_same_bytes(empty)
    assert_same_bytes(empty, only="a")
    some = snapshot_of(keys, np.full((2, len(WIRE_OPERATORS)), 12.5), present=[0, 2])
    assert_same_bytes(some)
    assert_same_bytes(some, only="b")


def test_nodes_whose_first_resource_differs_and_metadata_on_every_node() -> None:
    """Each node's opening carries the prefix of its own first resource; metadata merges
    ``dataCenter`` first, an explicit one overriding it, an empty one giving the default."""
    keys = [
        ("n3", Resource.ENERGY),
        ("n1", Resource.MEMORY),
        ("n2", Resource.DISK),
        ("n3", Resource.NETWORK),
        ("n0", Resource.CPU),
        ("n2", Resource.ENERGY),
        ("n0", Resource.MEMORY),
    ]
    values = np.resize(np.asarray(AWKWARD[::-1]), (len(keys), len(WIRE_OPERATORS)))
    snap = snapshot_of(
        keys,
        values,
        tags={"n2": {"quality": "partial", "detail": {"disk": ["stale", None, 1.5]}}},
        node_info={
            "n0": {"capacity_cpu": "8", "allocatable_cpu": "7500m"},
            "n1": {"zone": "b", "dataCenter": "dc-2"},
            "n2": {},
            "n3": {"capacity_memory": "64Gi"},
        },
    )
    assert_same_bytes(snap)
    for node in ("n0", "n1", "n2", "n3"):
        assert_same_bytes(snap, only=node)


def test_control_characters_cannot_pass_for_the_node_marker() -> None:
    """orjson escapes a NUL inside any string, so only the node marker splits the text."""
    keys = [("a\x00b", Resource.CPU), ("\x00", Resource.MEMORY), ("c", Resource.CPU)]
    snap = snapshot_of(
        keys,
        np.full((3, len(WIRE_OPERATORS)), 1e-5),
        source="\x00src",
        metric_names={Resource.CPU: "cpu\x00", Resource.MEMORY: "\x01"},
        tags={"a\x00b": {"\x00": "\x00\x1f"}, "c": {"k": ["\x00"]}},
        node_info={"\x00": {"\x00": "\x00"}},
    )
    assert_same_bytes(snap)
    assert_same_bytes(snap, only="a\x00b")


def test_a_snapshot_of_many_nodes_with_tag_detail() -> None:
    """Rows interleaved across nodes, as a store filled resource by resource holds them."""
    nodes = [f"node-{i:03d}" for i in range(120)]
    keys = [(n, r) for r in (Resource.MEMORY, Resource.CPU) for n in reversed(nodes)]
    rng = np.random.default_rng(5)
    values = rng.uniform(0, 100, (len(keys), len(WIRE_OPERATORS)))
    values[::7, 2] = math.nan
    values[::11, 0] = -0.0
    tags = {n: {"quality": "ok", "lastSample": 1699999990} for n in nodes}
    tags["node-007"] = {"quality": "stale", "lastSample": 1, "detail": {"cpu": {"age": 900.5}}}
    present = [*range(0, len(keys), 3), 1]
    snap = snapshot_of(keys, values[: len(present)], present=present, tags=tags)
    assert_same_bytes(snap)


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(alphabet='ab.-_:é"\\', min_size=1, max_size=6),
            st.sampled_from(list(Resource)),
        ),
        min_size=1,
        max_size=12,
        unique=True,
    ),
    st.data(),
)
def test_any_snapshot_gives_the_same_bytes(keys: list[tuple[str, Resource]], data) -> None:
    floats = st.floats(allow_infinity=True, allow_nan=True, width=64)
    values = np.asarray(
        [data.draw(st.lists(floats, min_size=9, max_size=9)) for _ in keys], np.float64
    )
    snap = snapshot_of(keys, values, tags={k[0]: {"lastSample": 1} for k in keys[::2]})
    assert_same_bytes(snap)
    assert_same_bytes(snap, only=keys[-1][0])


@pytest.mark.parametrize("nodes", [1, 250])
def test_bodies_of_a_built_snapshot(nodes: int) -> None:
    """Through snapshot.build (rollups of a real store), as the service renders them."""
    from tests.unit.engine.test_published import make_snapshot

    assert_same_bytes(make_snapshot(nodes))


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(1, 5), st.integers(1, 30), st.integers(0, 2))
def test_bodies_made_a_few_nodes_at_a_time_are_the_same_bytes(
    at_a_time: int, nodes: int, skip: int
) -> None:
    """The pieces come a run of nodes at a time (``NODES_AT_A_TIME``): runs that end
    anywhere, the last one short or exactly full, give the document's bytes."""
    keys = [(f"n{i:02d}", r) for i in range(nodes) for r in (Resource.CPU, Resource.MEMORY)]
    present = list(range(skip, len(keys)))  # a node whose first resource is missing
    values = np.resize(np.asarray(AWKWARD), (len(present), len(WIRE_OPERATORS)))
    snap = snapshot_of(keys, values, present=present, tags={"n00": {"lastSample": 1}})
    default = fastencode.NODES_AT_A_TIME
    fastencode.NODES_AT_A_TIME = at_a_time
    try:
        assert_same_bytes(snap)
    finally:
        fastencode.NODES_AT_A_TIME = default
