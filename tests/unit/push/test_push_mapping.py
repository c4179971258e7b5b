"""Pushes to node utilisation samples: recording rules, raw node-exporter series, HA pairs,
Telegraf lines; the batches go into the sample store as a provider's do."""

from __future__ import annotations

import struct

import cramjam
import numpy as np
import pytest

from loadwatcher.model import Resource, SeriesBatch
from loadwatcher.pipeline import plausible
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.push import remote_write
from loadwatcher.push import remote_write_pb2 as pb
from loadwatcher.push.line_protocol_mapping import LineProtocolMapping, map_line_protocol
from loadwatcher.push.remote_write import decode_write_request, parse_write_request
from loadwatcher.push.remote_write_mapping import RemoteWriteMapping, RemoteWriteReceiver

STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0_0000_0000_0002))[0]
CPU, MEM = "instance:node_cpu:ratio", "instance:node_memory_utilisation:ratio"

SeriesSpec = tuple[str, dict[str, str], list[tuple[int, float]]]


def request(*series: SeriesSpec) -> remote_write.WriteRequestBytes:
    wr = pb.WriteRequest()
    for name, labels, samples in series:
        ts = wr.timeseries.add()
        for k, text in sorted({"__name__": name, **labels}.items()):
            ts.labels.add(name=k, value=text)
        for t, v in samples:
            ts.samples.add(timestamp=t, value=v)
    body = bytes(cramjam.snappy.compress_raw(wr.SerializeToString()))
    return decode_write_request(body, 1 << 24)


def as_dict(batch: SeriesBatch) -> dict[tuple[str, Resource], list[tuple[float, float]]]:
    out = {}
    first = np.cumsum(batch.lengths) - batch.lengths
    for key, a, n in zip(batch.keys, first.tolist(), batch.lengths.tolist(), strict=True):
        out[key] = list(
            zip(batch.ts[a : a + n].tolist(), batch.values[a : a + n].tolist(), strict=True)
        )
    return out


def test_recording_rule_series_become_percent_per_node() -> None:
    receiver = RemoteWriteReceiver(RemoteWriteMapping())
    decoded = receiver.map(
        request(
            (CPU, {"instance": "10.0.0.1:9100"}, [(1_700_000_000_500, 0.25)]),
            (MEM, {"instance": "10.0.0.1:9100"}, [(1_700_000_000_000, 0.5)]),
            (CPU, {"instance": "[::1]:9100"}, [(1_700_000_000_000, 0.1)]),
            ("node_load1", {"instance": "10.0.0.1:9100"}, [(1_700_000_000_000, 3.0)]),
        ),
        now=1_700_000_001.0,
    )
    assert as_dict(decoded.batch) == {
        ("10.0.0.1", Resource.CPU): [(1_700_000_000.5, 25.0)],
        ("10.0.0.1", Resource.MEMORY): [(1_700_000_000.0, 50.0)],
        ("::1", Resource.CPU): [(1_700_000_000.0, 10.0)],
    }
    assert decoded.counts == {"series": 4, "unmatched": 1, "samples": 3, "accepted": 3}
    assert decoded.nodes == {"10.0.0.1", "::1"}


def test_the_prometheus_provider_settings_carry_over() -> None:
    mapping = RemoteWriteMapping(
        cpu_metric="cpu_pct",
        memory_metric="mem_pct",
        node_label="node",
        strip_port=False,
        scale=1.0,
    )
    decoded = RemoteWriteReceiver(mapping).map(
        request(
            ("cpu_pct", {"node": "a:1", "instance": "x"}, [(1000, 40.0)]),
            ("mem_pct", {"instance": "b"}, [(1000, 40.0)]),
        ),
        now=2.0,
    )
    assert as_dict(decoded.batch) == {("a:1", Resource.CPU): [(1.0, 40.0)]}
    assert decoded.counts["no_node"] == 1


def test_stale_markers_go_to_the_store_as_markers_and_other_nans_as_they_are() -> None:
    decoded = RemoteWriteReceiver(RemoteWriteMapping()).map(
        request(
            (CPU, {"instance": "n1"}, [(1000, 0.5), (2000, STALE), (3000, float("nan"))]),
        ),
        now=4.0,
    )
    [(key, samples)] = as_dict(decoded.batch).items()
    assert key == ("n1", Resource.CPU)
    assert samples[0] == (1.0, 50.0)
    # The marker keeps its exact payload through the scaling: the store tells it by that.
    assert samples[1][0] == 2.0 and plausible.stale(np.array([samples[1][1]]))[0]
    assert samples[2][0] == 3.0 and np.isnan(samples[2][1])
    assert not plausible.stale(np.array([samples[2][1]]))[0]
    assert "stale_marker" not in decoded.counts
    assert decoded.counts["accepted"] == 3


def test_a_raw_series_marker_ends_its_counter_and_goes_no_further() -> None:
    decoded = RemoteWriteReceiver(RemoteWriteMapping(raw_node_exporter=True)).map(
        request(
            (
                "node_cpu_seconds_total",
                {"instance": "n1", "cpu": "0", "mode": "idle"},
                [(1000, 5.0), (2000, STALE)],
            ),
        ),
        now=4.0,
    )
    assert decoded.counts["stale_marker"] == 1


def test_samples_of_one_node_and_time_keep_the_last_pushed() -> None:
    decoded = RemoteWriteReceiver(RemoteWriteMapping()).map(
        request(
            (CPU, {"instance": "n1:1"}, [(2000, 0.2)]),
            (CPU, {"instance": "n1:2"}, [(1000, 0.1), (2000, 0.3)]),
        ),
        now=3.0,
    )
    assert as_dict(decoded.batch) == {("n1", Resource.CPU): [(1.0, 10.0), (2.0, 30.0)]}


def test_ha_pairs_keep_one_replica_until_it_goes_quiet() -> None:
    receiver = RemoteWriteReceiver(RemoteWriteMapping(), failover_timeout_s=30.0)

    def push(replica: str, t: int, now: float) -> dict[str, int]:
        labels = {"instance": "n1", "cluster": "eu", "prometheus_replica": replica}
        return receiver.map(request((CPU, labels, [(t, 0.5)])), now).counts

    assert push("a", 1000, 1.0)["accepted"] == 1
    assert push("b", 1000, 2.0) == {
        "series": 1,
        "unmatched": 0,
        "samples": 1,
        "ha_non_elected": 1,
        "accepted": 0,
    }
    assert push("a", 2000, 20.0)["accepted"] == 1
    assert push("b", 3000, 50.0)["accepted"] == 0  # a pushed 30 s ago: not yet
    assert push("b", 3000, 50.5)["accepted"] == 1
    assert push("a", 4000, 51.0)["ha_non_elected"] == 1
    assert receiver.ha.elected() == {"eu": "b"}


def test_without_ha_labels_every_series_is_kept() -> None:
    receiver = RemoteWriteReceiver(RemoteWriteMapping(replica_label="", cluster_label=""))
    decoded = receiver.map(
        request(
            (CPU, {"instance": "n1", "prometheus_replica": "a"}, [(1000, 0.5)]),
            (CPU, {"instance": "n2", "prometheus_replica": "b"}, [(1000, 0.5)]),
        ),
        now=1.0,
    )
    assert decoded.counts["accepted"] == 2


def test_pushed_batches_go_into_the_store_and_a_retry_adds_nothing() -> None:
    receiver = RemoteWriteReceiver(RemoteWriteMapping())
    req = request(
        (CPU, {"instance": "n1"}, [(1_700_000_000_000, 0.5), (1_700_000_015_000, 0.6)]),
        (MEM, {"instance": "n1"}, [(1_700_000_000_000, 0.7)]),
    )
    store = SampleStore()
    first = store.add([receiver.map(req, 1_700_000_016.0).batch])
    assert len(first.added) == 3
    again = store.add([receiver.map(req, 1_700_000_017.0).batch])
    assert len(again.added) == 0


def test_raw_node_exporter_series_become_utilisation() -> None:
    """Agent mode: counters and gauges as scraped, a node's series spread over two shards."""
    receiver = RemoteWriteReceiver(RemoteWriteMapping(raw_node_exporter=True))
    receiver.cpu.settle_s = 5.0
    node = {"instance": "10.0.0.1:9100", "job": "node"}
    times = [1_700_000_000_000 + 15_000 * k for k in range(4)]
    idle = {"0": [100.0, 112.0, 124.0, 136.0], "1": [50.0, 59.0, 68.0, 2.0]}  # cpu 1 restarts
    iowait = {"0": [10.0, 10.75, 11.5, 12.25], "1": [0.0, 0.0, 0.0, 0.0]}
    got: dict[tuple[str, Resource], list[tuple[float, float]]] = {}
    for k, t in enumerate(times):
        shard_a: list[SeriesSpec] = [
            ("node_cpu_seconds_total", {**node, "cpu": c, "mode": "idle"}, [(t, idle[c][k])])
            for c in ("0", "1")
        ]
        shard_a.append(
            ("node_cpu_seconds_total", {**node, "cpu": "0", "mode": "user"}, [(t, 5.0 * k)])
        )
        shard_b: list[SeriesSpec] = [
            ("node_cpu_seconds_total", {**node, "cpu": c, "mode": "iowait"}, [(t, iowait[c][k])])
            for c in ("0", "1")
        ]
        shard_b.append(("node_memory_MemTotal_bytes", node, [(t, 1000.0)]))
        shard_b.append(("node_memory_MemAvailable_bytes", node, [(t, 250.0 + k)]))
        for shard in (shard_a, shard_b):
            decoded = receiver.map(request(*shard), now=10.0 * k)
            for key, samples in as_dict(decoded.batch).items():
                got.setdefault(key, []).extend(samples)
    cpu = [(t, round(v, 9)) for t, v in got[("10.0.0.1", Resource.CPU)]]
    # At 15 s: cpu 0 idle 12/15 + iowait 0.75/15 = 0.85, cpu 1 0.6 -> 1 - 0.725 = 27.5 %.
    # At 45 s cpu 1's idle counter restarted at 2: its rate is 2/15.
    assert cpu == [
        (1_700_000_015.0, 27.5),
        (1_700_000_030.0, 27.5),
        (1_700_000_045.0, round(100 * (1 - (0.85 + 2 / 15) / 2), 9)),
    ]
    memory = got[("10.0.0.1", Resource.MEMORY)]
    assert [t for t, _ in memory] == [1_700_000_000.0 + 15 * k for k in range(4)]
    assert [v for _, v in memory] == pytest.approx([75.0 - 0.1 * k for k in range(4)])


def test_raw_memory_of_many_nodes_keeps_each_node_whatever_the_order() -> None:
    """Series read from the index of earlier pushes come in any order: each node's value
    stays its own (a request of raw memory alone once named them by position)."""
    receiver = RemoteWriteReceiver(RemoteWriteMapping(raw_node_exporter=True))
    used = {"a": 0.40, "b": 0.75, "c": 0.10}
    for k, order in enumerate(("abc", "cab", "b", "ca", "bca")):
        t = 1_700_000_000_000 + 1000 * k
        series: list[SeriesSpec] = []
        for name in order:
            labels = {"instance": f"node-{name}:9100", "job": "node"}
            series.append(("node_memory_MemAvailable_bytes", labels, [(t, 1e9 * (1 - used[name]))]))
            series.append(("node_memory_MemTotal_bytes", labels, [(t, 1e9)]))
        got = as_dict(receiver.map(request(*series), now=float(k)).batch)
        rounded = {key: [(ts, round(v, 9)) for ts, v in got[key]] for key in got}
        assert rounded == {
            (f"node-{name}", Resource.MEMORY): [(t / 1000, round(100 * used[name], 9))]
            for name in order
        }, order


def test_a_sender_request_never_needs_protobufs_own_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """5,000 nodes, two series each, as Prometheus writes them: read in bulk, then by label
    set; every sample lands."""

    def refuse(*args: object) -> object:
        raise AssertionError("a series in a sender's layout was left to protobuf")

    monkeypatch.setattr(remote_write, "_read_with_protobuf", refuse)
    receiver = RemoteWriteReceiver(RemoteWriteMapping())
    for step in range(2):
        wr = pb.WriteRequest()
        for i in range(5000):
            for name in (CPU, MEM):
                ts = wr.timeseries.add()
                labels = {
                    "__name__": name,
                    "instance": f"10.0.{i // 250}.{i % 250}:9100",
                    "job": "node-exporter",
                    "prometheus_replica": "prometheus-k8s-0",
                    "cluster": "eu1",
                }
                for k, v in sorted(labels.items()):
                    ts.labels.add(name=k, value=v)
                ts.samples.add(value=i / 5000, timestamp=1_700_000_000_000 + 15_000 * step)
        decoded = receiver.map(parse_write_request(wr.SerializeToString()), now=1.0)
        assert decoded.counts["accepted"] == 10_000
        assert len(decoded.batch.keys) == 10_000
        assert decoded.batch.values.max() == pytest.approx(100 * 4999 / 5000)


# ------------------------------------------------------------------ line protocol


def test_telegraf_lines_become_percent_per_host() -> None:
    body = (
        b"cpu,cpu=cpu-total,host=n1 usage_idle=97.5 1700000000000000000\n"
        b"cpu,cpu=cpu0,host=n1 usage_idle=50 1700000000000000000\n"
        b"mem,host=n1 used_percent=42.25 1700000000500000000\n"
        b"mem,host=n2 used_percent=10\n"
        b"disk,host=n1 used=1i 1700000000000000000\n"
        b"mem,host=n3 used_percent=oops\n"
    )
    decoded = map_line_protocol(body, LineProtocolMapping(), unit_ns=1, now=1_700_000_001.25)
    assert as_dict(decoded.batch) == {
        ("n1", Resource.CPU): [(1_700_000_000.0, 2.5)],
        ("n1", Resource.MEMORY): [(1_700_000_000.5, 42.25)],
        ("n2", Resource.MEMORY): [(1_700_000_001.25, 10.0)],
    }
    assert decoded.counts == {
        "lines": 6,
        "unmatched": 2,
        "malformed_value": 1,
        "accepted": 3,
    }
    assert decoded.nodes == {"n1", "n2"}


def test_the_influxdb_provider_settings_carry_over() -> None:
    mapping = LineProtocolMapping(
        host_tag="node",
        cpu_measurement="sys",
        cpu_field="busy",
        cpu_field_is_idle=False,
        cpu_tags=(),
        memory_measurement="memory",
        memory_field="used",
        scale=100.0,
    )
    body = b"sys,node=a busy=0.25 5\nmemory,node=a used=0.5 5\ncpu,host=a usage_idle=1 5"
    decoded = map_line_protocol(body, mapping, unit_ns=1_000_000_000, now=0.0)
    assert as_dict(decoded.batch) == {
        ("a", Resource.CPU): [(5.0, 25.0)],
        ("a", Resource.MEMORY): [(5.0, 50.0)],
    }
