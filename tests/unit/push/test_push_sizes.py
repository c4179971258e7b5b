"""Node sizes from what pushes carry: node-exporter's MemTotal and CPU series (remote write,
with or without ``raw_node_exporter``), Telegraf's ``mem.total`` and ``system.n_cpus``
(line protocol); kept per node, bounded, and handed to the engine with the node's samples."""

from __future__ import annotations

import struct
from typing import Any

import cramjam
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from loadwatcher.model import Resource, SeriesBatch
from loadwatcher.providers.push.buffer import PushBuffer
from loadwatcher.providers.push.provider import PushProvider
from loadwatcher.push import remote_write
from loadwatcher.push import remote_write_pb2 as pb
from loadwatcher.push.line_protocol_mapping import LineProtocolMapping, map_line_protocol
from loadwatcher.push.remote_write_mapping import RemoteWriteMapping, RemoteWriteReceiver
from loadwatcher.push.sizes import MAX_CPUS, PushedSizes

CPU = "instance:node_cpu:ratio"
STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0_0000_0000_0002))[0]
T = 1_700_000_000_000
NOW = 1_700_000_001.0


def request(*series: Any) -> remote_write.WriteRequestBytes:
    wr = pb.WriteRequest()
    for name, labels, samples in series:
        ts = wr.timeseries.add()
        for k, text in sorted({"__name__": name, **labels}.items()):
            ts.labels.add(name=k, value=text)
        for t, v in samples:
            ts.samples.add(timestamp=t, value=v)
    body = bytes(cramjam.snappy.compress_raw(wr.SerializeToString()))
    return remote_write.decode_write_request(body, 1 << 24)


def _cpu_series(instance: str, cpus: range, modes: tuple[str, ...] = ("idle", "user")) -> list[Any]:
    return [
        ("node_cpu_seconds_total", {"instance": instance, "cpu": str(c), "mode": m}, [(T, 10.0)])
        for c in cpus
        for m in modes
    ]


def test_remote_write_sizes_without_raw_node_exporter_and_counts_unchanged() -> None:
    receiver = RemoteWriteReceiver(RemoteWriteMapping())
    decoded = receiver.map(
        request(
            (CPU, {"instance": "10.0.0.1:9100"}, [(T, 0.25)]),
            *_cpu_series("10.0.0.1:9100", range(4)),
            ("node_memory_MemTotal_bytes", {"instance": "10.0.0.1:9100"}, [(T, 8e9)]),
            ("node_memory_MemAvailable_bytes", {"instance": "10.0.0.1:9100"}, [(T, 6e9)]),
        ),
        now=NOW,
    )
    assert decoded.node_info == {"10.0.0.1": {"capacity.cpu": "4", "capacity.memory": "8000000000"}}
    # The raw series give no utilisation with raw_node_exporter off, and count as before.
    assert set(decoded.batch.keys) == {("10.0.0.1", Resource.CPU)}
    assert decoded.counts["unmatched"] == 10 and decoded.counts["samples"] == 1
    assert decoded.nodes == {"10.0.0.1"}


def test_a_nodes_cpus_add_up_across_requests_and_an_ended_cpu_does_not_count() -> None:
    receiver = RemoteWriteReceiver(RemoteWriteMapping(raw_node_exporter=True))
    first = receiver.map(request(*_cpu_series("n:9100", range(0, 2))), now=NOW)
    assert first.node_info == {"n": {"capacity.cpu": "2"}}
    second = receiver.map(request(*_cpu_series("n:9100", range(2, 8))), now=NOW + 1)
    assert second.node_info == {"n": {"capacity.cpu": "8"}}
    ended = receiver.map(
        request(
            (
                "node_cpu_seconds_total",
                {"instance": "n:9100", "cpu": "9", "mode": "idle"},
                [(T, 1.0), (T + 1, STALE)],
            )
        ),
        now=NOW + 2,
    )
    assert ended.node_info == {}  # a CPU series that ended is no CPU
    again = receiver.map(request(*_cpu_series("n:9100", range(1))), now=NOW + 3)
    assert again.node_info == {"n": {"capacity.cpu": "8"}}


def test_cpus_not_pushed_for_a_while_are_forgotten_and_a_clock_going_back_keeps_them() -> None:
    sizes = PushedSizes(forget_after_s=600)
    assert sizes.add([("n", str(c)) for c in range(8)], [], 1000.0) == {"n": {"capacity.cpu": "8"}}
    assert sizes.add([("n", "0"), ("n", "1")], [], 1100.0) == {"n": {"capacity.cpu": "8"}}
    assert sizes.add([("n", "0"), ("n", "1")], [], 1700.0) == {"n": {"capacity.cpu": "2"}}
    assert sizes.add([("n", "2")], [], 500.0) == {"n": {"capacity.cpu": "3"}}


def test_a_hostile_writer_cannot_grow_the_sizes_without_bound() -> None:
    sizes = PushedSizes(max_nodes=3)
    for k in range(10):
        sizes.add([(f"n{k}", "0")], [(f"n{k}", 1e9)], 1000.0)
    assert len(sizes) == 3
    many = sizes.add([("n9", str(c)) for c in range(MAX_CPUS + 50)], [], 1000.0)
    assert many["n9"]["capacity.cpu"] == str(MAX_CPUS)
    odd = sizes.add([], [("n8", float("nan")), ("n7", -1.0), ("n7", 1e30)], 1000.0)
    assert odd == {"n8": {"capacity.cpu": "1", "capacity.memory": "1000000000"}} | {
        "n7": {"capacity.cpu": "1"}
    }


def test_telegraf_mem_total_and_n_cpus_become_sizes() -> None:
    body = (
        b"mem,host=n1 used_percent=42.25,total=17179869184i 1700000000000000000\n"
        b"system,host=n1 load1=0.5,n_cpus=8i 1700000000000000000\n"
        b"system,host=n1 n_cpus=16i 1700000000500000000\n"
        b"system,host=n2 n_cpus=4i,n_users=2i\n"
        b"mem,host=n3 total=-5i\n"
    )
    decoded = map_line_protocol(body, LineProtocolMapping(), unit_ns=1, now=NOW)
    assert decoded.node_info == {
        "n1": {"capacity.cpu": "16", "capacity.memory": "17179869184"},
        "n2": {"capacity.cpu": "4"},
    }
    assert {k[0] for k in decoded.batch.keys} == {"n1"}


def _batch(node: str) -> SeriesBatch:
    return SeriesBatch(
        [(node, Resource.CPU)], np.array([1], np.int64), np.array([NOW]), np.array([5.0])
    )


async def test_a_size_reaches_the_engine_with_its_nodes_samples_only() -> None:
    buffer = PushBuffer(100, max_sized_nodes=2)
    provider = PushProvider(buffer)
    buffer.put_sizes({"a": {"capacity.memory": "1000"}, "ghost": {"capacity.cpu": "2"}})
    buffer.put(_batch("a"))
    result = await provider.fetch(NOW, None)
    assert result.node_info == {"a": {"capacity.memory": "1000"}}  # ghost has no samples
    buffer.put_sizes({"a": {"capacity.cpu": "4"}})  # another request, another fact
    buffer.put(_batch("a"))
    assert (await provider.fetch(NOW + 1, NOW)).node_info == {
        "a": {"capacity.memory": "1000", "capacity.cpu": "4"}
    }
    buffer.put_sizes({"b": {"capacity.cpu": "1"}, "c": {"capacity.cpu": "1"}})
    buffer.put(_batch("a"))
    assert (await provider.fetch(NOW + 2, NOW + 1)).node_info == {}  # a forgotten: bound 2


@given(st.permutations([(f"n{k % 3}", str(k)) for k in range(12)]))
def test_the_cpu_count_does_not_depend_on_the_order_of_arrival(pairs: list[Any]) -> None:
    sizes = PushedSizes()
    for k in range(0, 12, 5):
        sizes.add(pairs[k : k + 5], [], 1000.0)
    final = sizes.add([(f"n{k}", "0") for k in range(3)], [], 1000.0)
    expected = {f"n{n}": len({p for node, p in pairs if node == f"n{n}"} | {"0"}) for n in range(3)}
    assert {n: int(f["capacity.cpu"]) for n, f in final.items()} == expected
