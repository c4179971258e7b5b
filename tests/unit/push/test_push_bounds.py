"""What the receiver keeps is bounded whatever writers send, checked
on the data structures' own accounting, not by timing: the series index by bytes, the HA
tracker by count (least recently seen forgotten first), the raw-series state by nodes.
(The store's bound, push.max_series, is checked over HTTP in test_push_acknowledged.)"""

from __future__ import annotations

import cramjam
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.push import remote_write_pb2 as pb
from loadwatcher.push.ha import HATracker
from loadwatcher.push.remote_write import decode_write_request
from loadwatcher.push.remote_write_mapping import RemoteWriteMapping, RemoteWriteReceiver
from loadwatcher.push.state import CounterState, GaugePairs
from tests.support.fuzzing import examples

T = 1_700_000_000.0
CPU = "instance:node_cpu:ratio"


def hostile_request(k: int, series: int, label_bytes: int) -> bytes:
    """``series`` series of the CPU rule, each with a unique label set of about
    ``label_bytes`` bytes and no node label."""
    wr = pb.WriteRequest()
    for i in range(series):
        ts = wr.timeseries.add()
        ts.labels.add(name="__name__", value=CPU)
        ts.labels.add(name="junk", value=f"{k}-{i}-".ljust(label_bytes, "x"))
        ts.samples.add(timestamp=int(T * 1000), value=0.5)
    return bytes(cramjam.snappy.compress_raw(wr.SerializeToString()))


def test_unique_15_kb_label_sets_keep_the_series_index_within_its_bytes() -> None:
    receiver = RemoteWriteReceiver(RemoteWriteMapping())
    index = receiver.index
    index.max_bytes = 4 * 1024 * 1024
    request_bytes = 100 * (15_000 + 200)
    highest = 0
    for k in range(12):  # 18 MB of label sets, each sent once
        body = hostile_request(k, 100, 15_000)
        decoded = receiver.map(decode_write_request(body, 1 << 30), T)
        assert decoded.counts["no_node"] == 100  # all discarded, as in the issue
        held = sum(len(key) for key in index._ids)
        assert index.accounted_bytes() >= held
        highest = max(highest, index.accounted_bytes())
        # Checked at each request: at most one request's sets over the bound.
        assert index.accounted_bytes() <= index.max_bytes + request_bytes
    assert highest > index.max_bytes // 2  # the sets were remembered, then let go


def test_new_node_names_each_push_keep_the_index_and_the_names_bounded() -> None:
    """A writer inventing node names: the index's values and the receiver's name lists
    start afresh with it."""
    receiver = RemoteWriteReceiver(RemoteWriteMapping())
    receiver.index.max_bytes = 1024 * 1024
    for k in range(40):
        wr = pb.WriteRequest()
        for i in range(500):
            ts = wr.timeseries.add()
            ts.labels.add(name="__name__", value=CPU)
            ts.labels.add(name="instance", value=f"node-{k}-{i}:9100")
            ts.samples.add(timestamp=int(T * 1000) + k, value=0.5)
        body = bytes(cramjam.snappy.compress_raw(wr.SerializeToString()))
        receiver.map(decode_write_request(body, 1 << 30), T + k)
        assert receiver.index.accounted_bytes() <= receiver.index.max_bytes + 500 * 400
        assert len(receiver._node_names) == len(receiver.index.label_values[0])
        assert len(receiver._node_names) <= 4_000


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.integers(0, 5_000), min_size=1, max_size=400), st.integers(1, 50))
def test_the_ha_tracker_keeps_at_most_max_clusters_and_forgets_the_least_recent(
    clusters: list[int], limit: int
) -> None:
    """Millions of cluster values: at most ``max_clusters`` elections; a pair that keeps
    pushing between the others is never forgotten, so its other replica stays refused."""
    ha = HATracker(failover_timeout_s=30.0, max_clusters=limit)
    assert ha.accept("prod", "a", T)
    for step, c in enumerate(clusters):
        assert ha.accept(f"c{c}", "r1", T + step / 1000)
        assert len(ha) <= limit
        if step % max(1, limit - 1) == 0:
            assert ha.accept("prod", "a", T + step / 1000)  # seen: kept
            assert not ha.accept("prod", "b", T + step / 1000)


def test_raw_series_state_keeps_at_most_max_nodes() -> None:
    cpu, memory = CounterState(max_nodes=100), GaugePairs(max_nodes=100)
    counts: dict[str, int] = {}
    for i in range(1_000):
        t = int(T * 1000) + i * 15_000
        cpu.add([(f"n{i}", "0", "idle", [t], [1.0], [False])], T + i, counts)
        memory.add([(f"n{i}", True, [t], [8.0])], T + i)
        assert len(cpu) <= 100 and len(memory) <= 100
    # The most recent nodes are the ones kept.
    assert "n999" in cpu._nodes and "n0" not in cpu._nodes
