"""A 204 means kept: every limit is applied to the request before it is answered,
no cycle-level cap refuses what was acknowledged, a body that can never succeed is a 400,
and the counters add up: ``push_samples_total{outcome="accepted"}`` = ``samples_ingested``
+ ``samples_dropped{reason}``, whatever is pushed in whatever order.

The services are the real ones (``app.build_engine``, ``app.build_receiver``,
``api.make_app``) built from environment settings; the cycles run at explicit times.
"""

from __future__ import annotations

import asyncio
from typing import Any

import cramjam
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher import app
from loadwatcher.model import Resource, SeriesBatch
from loadwatcher.providers.push.provider import PushProvider
from loadwatcher.push import remote_write_pb2 as pb
from tests.support.fuzzing import examples
from tests.support.service import settings as service_settings
from tests.unit.push.test_push_http import (
    CPU,
    Service,
    T,
    node,
    start,
    telegraf,
    write_request,
)


def dropped_total(svc: Service) -> float:
    registry = svc.engine.metrics.registry
    total = 0.0
    for family in registry.collect():
        if family.name == "loadwatcher_samples_dropped":
            total += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return total


def assert_counts_add_up(svc: Service) -> None:
    ingested = svc.metric("loadwatcher_samples_ingested_total")
    assert svc.pushed("accepted") == ingested + dropped_total(svc)


def nodes(prefix: str, n: int, at: float = T) -> list[Any]:
    return [s for i in range(n) for s in node(f"{prefix}{i}", 0.5, 0.5, at)]


async def test_requests_of_many_new_series_in_one_cycle_lose_nothing_acknowledged(
    aiohttp_client: Any,
) -> None:
    """Three requests of new series within one cycle, over the cycle's own cap of
    new series (provider.max_new_series), while another writer pushes its one node: every
    sample answered 204 is published, the other writer's too."""
    svc = await start(aiohttp_client, {"LOADWATCHER_PROVIDER_MAX_NEW_SERIES": "100"})
    assert await svc.rw(*node("steady", 0.2, 0.3)) == 204
    await svc.engine.cycle(T + 1)
    for prefix in "abc":
        assert await svc.rw(*nodes(prefix, 60, T + 1)) == 204  # 120 new series each
        assert await svc.rw(*node("steady", 0.2, 0.3, T + 1)) == 204
    await svc.engine.cycle(T + 2)
    assert svc.engine.provider_status.ok, svc.engine.provider_status.error
    served = await svc.watcher()
    assert len(served) == 181 and {"steady", "a0", "b59", "c30"} <= set(served)
    assert svc.metric("loadwatcher_samples_ingested_total") == 2 + 360 + 2
    assert_counts_add_up(svc)


async def test_past_push_max_series_a_request_is_refused_whole_at_the_request(
    aiohttp_client: Any,
) -> None:
    """A writer inventing node names is refused (413, naming
    push.max_series) once the series held would pass it, nothing of that request kept;
    writers of known series go on."""
    svc = await start(aiohttp_client, {"LOADWATCHER_PUSH_MAX_SERIES": "300"})
    assert await svc.rw(*node("steady", 0.2, 0.3)) == 204
    await svc.engine.cycle(T + 1)
    assert await svc.rw(*nodes("a", 60, T + 1)) == 204
    assert await svc.rw(*nodes("b", 60, T + 1)) == 204  # 242 held with these
    status, doc, _ = await svc.post("/api/v1/write", write_request(*nodes("c", 60, T + 1)))
    assert status == 413 and doc is not None and doc["error"] == "series_limit"
    assert "push.max_series (300)" in doc["message"]
    assert svc.requests("/api/v1/write", 413) == 1
    assert await svc.rw(*node("steady", 0.2, 0.3, T + 2)) == 204  # known series still go
    await svc.engine.cycle(T + 3)
    served = await svc.watcher()
    assert len(served) == 121 and not any(name.startswith("c") for name in served)
    # The cycle merged them: the budget counts the store's series, and stays at the limit.
    assert svc.receiver.budget is not None and len(svc.receiver.budget) == 242
    status, _, _ = await svc.post("/api/v1/write", write_request(*nodes("d", 30, T + 3)))
    assert status == 413
    assert_counts_add_up(svc)


async def test_a_body_that_cannot_be_mapped_is_a_400_refused_whole(aiohttp_client: Any) -> None:
    """A label value that is not UTF-8, or a series protobuf cannot parse, is a 400
    naming it (never a 500), counted; the request's good series are not kept either."""
    svc = await start(aiohttp_client)
    good = node("good", 0.5, 0.5)
    wr = pb.WriteRequest()
    for name, labels, samples in good:
        ts = wr.timeseries.add()
        for k, text in sorted({"__name__": name, **labels}.items()):
            ts.labels.add(name=k, value=text)
        ts.samples.add(timestamp=round(samples[0][0] * 1000), value=samples[0][1])
    raw = wr.SerializeToString()
    # A series whose node label is not UTF-8: the same layout, one byte changed.
    bad_utf8 = raw.replace(b"good:9100", b"go\xffd:9100", 1)
    # A series that protobuf cannot parse: a label said to be longer than the series.
    broken = raw + b"\x0a\x06\x0a\x08__name__"
    for body, code in ((bad_utf8, "not_protobuf"), (broken, "not_protobuf")):
        compressed = bytes(cramjam.snappy.compress_raw(body))
        status, doc, _ = await svc.post("/api/v1/write", compressed)
        assert status == 400, doc
        assert doc is not None and doc["error"] == code
    assert "UTF-8" in (await _message(svc, bad_utf8))
    assert svc.requests("/api/v1/write", 400) == 3
    assert svc.requests("/api/v1/write", 500) == 0
    await svc.engine.cycle(T + 1)
    assert await svc.watcher() == {}
    assert svc.pushed("accepted") == 0


async def _message(svc: Service, body: bytes) -> str:
    _, doc, _ = await svc.post("/api/v1/write", bytes(cramjam.snappy.compress_raw(body)))
    assert doc is not None
    return str(doc["message"])


async def test_too_old_and_seconds_sent_as_nanoseconds_are_dropped_with_a_reason(
    aiohttp_client: Any,
) -> None:
    """A sample older than the retention, and seconds sent with precision=ns (1970),
    are counted as too_old, not silently discarded."""
    svc = await start(aiohttp_client)
    assert await svc.rw(*node("old", 0.5, 0.5, T - 5000)) == 204
    status, _, _ = await svc.post("/write", telegraf("ns", 10, 20), precision="ns")
    assert status == 204
    await svc.engine.cycle(T + 1)
    reason = svc.metric("loadwatcher_samples_dropped_total", reason="too_old")
    assert reason == 4
    assert await svc.watcher() == {}
    assert_counts_add_up(svc)


async def test_a_retried_push_is_counted_and_an_older_sample_kept(
    aiohttp_client: Any,
) -> None:
    """A retried push (a time its series holds) is counted as duplicate, where it was
    discarded without a reason; a sample older than the series' newest is kept by time."""
    svc = await start(aiohttp_client)
    assert await svc.rw(*node("n", 0.5, 0.5, T)) == 204
    await svc.engine.cycle(T + 1)
    assert await svc.rw(*node("n", 0.5, 0.5, T)) == 204
    assert await svc.rw(*node("n", 0.4, 0.4, T - 10)) == 204
    await svc.engine.cycle(T + 2)
    assert svc.metric("loadwatcher_samples_dropped_total", reason="duplicate") == 2
    assert svc.metric("loadwatcher_samples_ingested_total") == 4
    assert_counts_add_up(svc)


async def test_push_require_replica_refuses_series_without_the_replica_label(
    aiohttp_client: Any,
) -> None:
    """With push.require_replica, a push without the replica label (or with an
    empty one) is a 400 while deduplication is on; one with it is taken."""
    svc = await start(aiohttp_client, {"LOADWATCHER_PUSH_REQUIRE_REPLICA": "true"})
    labels = {"instance": "n1:9100", "prometheus_replica": "a"}
    assert await svc.rw((CPU, labels, [(T, 0.5)])) == 204
    for replica in (None, ""):
        lacking = {"instance": "n1:9100"} | ({} if replica is None else {"cluster": "x"})
        status, doc, _ = await svc.post("/api/v1/write", write_request((CPU, lacking, [(T, 0.5)])))
        assert status == 400 and doc is not None and doc["error"] == "no_replica_label"
    # Off (the default), the same push is taken beside the elected replica, as documented.
    other = await start(aiohttp_client)
    assert await other.rw((CPU, {"instance": "n1:9100"}, [(T, 0.5)])) == 204


async def test_discards_at_the_receiver_are_not_accepted_and_the_sum_holds(
    aiohttp_client: Any,
) -> None:
    """Series without a node label, another replica of an elected HA pair, a series
    without the replica label (deduplication on, not required): each sample is accepted or
    discarded with a reason at the receiver, and the accepted ones add up at the store."""
    svc = await start(aiohttp_client)
    no_node = [(CPU, {"junk": "x" * 100}, [(T, 0.5)])]
    a = {"instance": "n1:9100", "prometheus_replica": "a", "cluster": "c1"}
    b = {**a, "prometheus_replica": "b"}
    plain = {"instance": "n2:9100"}
    assert await svc.rw(*no_node) == 204
    assert await svc.rw((CPU, a, [(T, 0.5)])) == 204
    assert await svc.rw((CPU, b, [(T, 0.6)])) == 204
    assert await svc.rw((CPU, plain, [(T, 0.7)])) == 204
    await svc.engine.cycle(T + 1)
    assert svc.pushed("no_node") == 1 and svc.pushed("ha_non_elected") == 1
    assert svc.pushed("received") == 4 and svc.pushed("accepted") == 2
    assert set(await svc.watcher()) == {"n1", "n2"}
    assert_counts_add_up(svc)


# -- the sum, under any order of pushes and cycles --------------------------------------

# A pushed sample: its node, its time relative to the cycle's clock, and its value.
OFFSETS = st.sampled_from([-5000.0, -30.0, -10.0, -1.0, 0.0, 30.0, 500.0])
VALUES = st.sampled_from([12.5, 50.0, 120.0, -1.0, float("nan")])
PUSH = st.lists(st.tuples(st.sampled_from(["n1", "n2", "n3"]), OFFSETS, VALUES), max_size=8)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.lists(PUSH, max_size=3), st.floats(1.0, 40.0)), max_size=5))
def test_accepted_is_ingested_plus_dropped_in_any_order(
    rounds: list[tuple[list[list[tuple[str, float, float]]], float]],
) -> None:
    """Whatever is pushed (old, duplicated, out of order, ahead, beyond the tolerance,
    not a utilisation) and whenever cycles run, every acknowledged sample is ingested or
    dropped with a reason."""
    asyncio.run(_run_rounds(rounds))


async def _run_rounds(rounds: list[tuple[list[list[tuple[str, float, float]]], float]]) -> None:
    config = service_settings({"METRICS_PROVIDER_NAME": "push"})
    engine = app.build_engine(config)
    provider = engine.provider
    assert isinstance(provider, PushProvider)
    now = T
    put = 0
    for pushes, step in rounds:
        for push in pushes:
            for name, offset, value in push:
                batch = SeriesBatch(
                    [(name, Resource.CPU)],
                    np.array([1], np.int64),
                    np.array([now + offset]),
                    np.array([value]),
                )
                provider.buffer.put(batch)
                put += 1
        now += step
        await engine.cycle(now)
        registry = engine.metrics.registry
        ingested = registry.get_sample_value("loadwatcher_samples_ingested_total") or 0.0
        dropped = sum(
            s.value
            for family in registry.collect()
            if family.name == "loadwatcher_samples_dropped"
            for s in family.samples
            if s.name.endswith("_total")
        )
        assert ingested + dropped == put
    await engine.wait_idle_work()
