"""The Prometheus provider against real servers: failures, advice, incremental fetches."""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
import time
from typing import Any

import pytest

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.model import Resource, node_name
from loadwatcher.providers.prometheus import provider, spans
from loadwatcher.providers.prometheus.spans import range_query
from tests.support.backends import free_port, openmetrics_text, vm_import, vm_import_lines
from tests.support.service import prometheus_engine
from tests.support.synth import CPU_METRIC, MEM_METRIC, node_history, node_names

pytestmark = pytest.mark.backend


async def test_one_failing_query_keeps_the_others(prometheus_factory) -> None:
    now = time.time()
    history = node_history(5, math.floor(now) - 1)
    prom = prometheus_factory(openmetrics_text(history))
    engine = prometheus_engine(prom.url, LOADWATCHER_PROMETHEUS_CPU_QUERY="rate(broken[")
    try:
        await engine.cycle(now)
        assert engine.current is not None
        snap = engine.current.snapshot
        assert snap.resources == {Resource.MEMORY}
        assert snap.nodes == node_names(history)
        verdict = engine.health(now)
        assert not verdict.healthy
        assert any("bad_query" in r and "broken" in r for r in verdict.body["reasons"])
    finally:
        await engine.close()


async def test_provider_down_at_start() -> None:
    engine = prometheus_engine(
        f"http://127.0.0.1:{free_port()}", LOADWATCHER_PROVIDER_TIMEOUT_S="2"
    )
    try:
        await engine.cycle()
        assert engine.current is None
        verdict = engine.health()
        assert not verdict.healthy
        assert verdict.body["provider"]["errorKind"] == "connect"
        assert any(r.startswith("provider down: connect") for r in verdict.body["reasons"])
    finally:
        await engine.close()


async def test_missing_recording_rules_are_explained(prometheus_factory) -> None:
    now = time.time()
    raw = [("node_load1", {"instance": "10.0.0.1:9100"}, [(math.floor(now) - 10, 1.0)])]
    prom = prometheus_factory(openmetrics_text(raw))
    engine = prometheus_engine(prom.url)
    try:
        await engine.cycle(now)
        reasons = " | ".join(engine.health(now).body["reasons"])
        assert "no recording rule of that name is loaded" in reasons
        assert "Install the kube-prometheus node recording rules" in reasons
        assert "prometheus.cpu_query" in reasons and "prometheus.memory_query" in reasons
        assert "fallback_node_exporter" in reasons
    finally:
        await engine.close()


async def test_node_exporter_fallback(prometheus_factory) -> None:
    """Without recording rules, raw node-exporter metrics give the same utilisation."""
    now = time.time()
    end = math.floor(now) - 1
    times = [end - 900 + 15 * k for k in range(61)]
    inst = {"instance": "10.0.0.7:9100", "job": "node"}
    series = [
        (
            "node_cpu_seconds_total",
            {**inst, "cpu": str(c), "mode": "idle"},
            [(t, 0.75 * (t - times[0])) for t in times],
        )  # idle 75 % of the time: 25 % busy
        for c in range(2)
    ]
    series += [
        ("node_memory_MemAvailable_bytes", inst, [(t, 6e9) for t in times]),
        ("node_memory_MemTotal_bytes", inst, [(t, 8e9) for t in times]),
    ]
    prom = prometheus_factory(openmetrics_text(series))
    engine = prometheus_engine(prom.url, LOADWATCHER_PROMETHEUS_FALLBACK_NODE_EXPORTER="true")
    try:
        await engine.cycle(now)
        assert engine.current is not None
        snap = engine.current.snapshot
        stats = snap.windows["5m"]
        by_resource = {snap.keys[int(s)][1]: i for i, s in enumerate(stats.sids)}
        avg = stats.values[next(iter(stats.values))]  # Latest
        assert avg[by_resource[Resource.CPU]] == pytest.approx(25.0, abs=1e-6)
        assert avg[by_resource[Resource.MEMORY]] == pytest.approx(25.0, abs=1e-6)
        assert snap.nodes == {"10.0.0.7"}
        body = engine.health(now).body
        assert not any("fallback" in r for r in body["reasons"]), body["reasons"]
        assert all("values come from the node-exporter fallback" in n for n in body["notes"])
        assert len(body["notes"]) == 2
    finally:
        await engine.close()


async def test_incremental_fetch_adds_only_new_samples(victoria_metrics_factory) -> None:
    now = time.time()
    end = math.floor(now) - 60.5
    history = node_history(4, end, span_s=1000.0)
    vm = victoria_metrics_factory(vm_import_lines(history))
    engine = prometheus_engine(vm.url)
    try:
        await engine.cycle(now)
        held = len(engine.store.columns)
        # A cold start reads the whole retention (1020 s) and nothing older.
        assert held == sum(1 for _, _, pts in history for t, _ in pts if t > now - 1020)
        assert engine.store.columns.ts.min() > now - 1020
        newer = [
            (m, labels, [(end + 15.0 * k, 0.5) for k in (1, 2, 3, 4)]) for m, labels, _ in history
        ]
        vm_import(vm, vm_import_lines(newer))
        await engine.cycle(now + 1)
        assert len(engine.store.columns) == held + 4 * 2 * 4
        assert engine.provider_status.ok
    finally:
        await engine.close()


def test_cold_start_slices_cover_the_retention_exactly() -> None:
    now = 1_700_000_000.25
    got = spans.slices(now, 1020)
    assert len(got) == math.ceil(1020 / spans.BACKFILL_SLICE_S)
    assert all(s <= spans.BACKFILL_SLICE_S for s, _ in got)
    # Oldest first, each ending where the next begins, the newest at now, the oldest
    # reaching back exactly the retention.
    assert [at for _, at in got] == sorted(at for _, at in got)
    assert got[-1][1] == now
    assert all(a + s2 == b for (_, a), (s2, b) in itertools.pairwise(got))
    assert got[0][1] - got[0][0] == now - 1020
    assert spans.slices(now, 60) == [(60, now)]
    odd = spans.slices(now, 257, slice_s=128)
    assert sum(s for s, _ in odd) == 257 and odd[-1][1] == now and len(odd) == 3


def test_range_query_uses_a_subquery_for_expressions() -> None:
    assert range_query(CPU_METRIC, 960, 15) == f"{CPU_METRIC}[960s]"
    assert range_query(f'{MEM_METRIC}{{job="node"}}', 60, 15) == f'{MEM_METRIC}{{job="node"}}[60s]'
    assert range_query("1 - avg(x)", 60, 15.0) == "(1 - avg(x))[60s:15s]"


@pytest.mark.parametrize(
    ("value", "strip", "expected"),
    [
        ("10.0.0.3:9100", True, "10.0.0.3"),
        ("node-1:9100", True, "node-1"),
        ("node-1", True, "node-1"),
        ("[::1]:9100", True, "::1"),
        ("fe80::1", True, "fe80::1"),
        ("10.0.0.3:9100", False, "10.0.0.3:9100"),
        ("host:abc", True, "host:abc"),
    ],
)
def test_node_name_strips_only_a_port(value, strip, expected) -> None:
    assert node_name(value, strip) == expected


# The queries counted below are the CPU and memory ones: the GPU defaults off.
CPU_AND_MEMORY_ONLY = {
    "LOADWATCHER_PROMETHEUS_GPU_QUERY": "",
    "LOADWATCHER_PROMETHEUS_GPU_MAX_QUERY": "",
}


async def test_answers_are_parsed_off_the_event_loop(prometheus_factory, monkeypatch) -> None:
    """A 5,000-node cold answer takes ~70 ms to parse: the loop must keep serving meanwhile."""
    now = time.time()
    history = node_history(3, math.floor(now) - 1)
    prom = prometheus_factory(openmetrics_text(history))
    engine = prometheus_engine(prom.url, **CPU_AND_MEMORY_ONLY)
    threads: list[threading.Thread] = []
    # The name provider imported and calls (not exported), patched below.
    real = provider.parse_answer  # type: ignore[attr-defined]

    def recording(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(provider, "parse_answer", recording)
    try:
        await engine.cycle(now)
        assert engine.current is not None and engine.current.snapshot.nodes
    finally:
        await engine.close()
    # A cold start: each resource's retention in slices, every one parsed in a worker.
    assert len(threads) == 2 * len(spans.slices(now, 1020))
    assert all(t is not threading.main_thread() for t in threads)


def cold_provider(
    prometheus_factory: Any,
) -> tuple[float, list[Any], Any, provider.PrometheusProvider]:
    """A Prometheus with three nodes' history and an engine reading it, not yet polled."""
    now = time.time()
    history = node_history(3, math.floor(now) - 1)
    prom = prometheus_factory(openmetrics_text(history))
    engine = prometheus_engine(prom.url, **CPU_AND_MEMORY_ONLY)
    assert isinstance(engine.provider, provider.PrometheusProvider)
    return now, history, engine, engine.provider


async def test_a_slice_that_fails_to_parse_leaves_no_question_behind(
    prometheus_factory, monkeypatch
) -> None:
    """When one slice's answer is malformed, that resource's cold fetch fails with it, the
    slice asked ahead is withdrawn (no task left running or unawaited), and the other
    resource's samples still arrive."""
    now, _history, engine, prom_provider = cold_provider(prometheus_factory)
    real_parse = provider.parse_answer  # type: ignore[attr-defined]
    cpu_slices = 0

    def failing_parse(body: bytes, resource: Resource, *args: Any, **kwargs: Any) -> Any:
        nonlocal cpu_slices
        if resource is Resource.CPU:
            cpu_slices += 1
            if cpu_slices == 3:
                raise ProviderError(ProviderErrorKind.BAD_RESPONSE, "malformed slice")
        return real_parse(body, resource, *args, **kwargs)

    monkeypatch.setattr(provider, "parse_answer", failing_parse)
    before = asyncio.all_tasks()
    try:
        result = await prom_provider.fetch(now, None)
        await asyncio.sleep(0.05)
        assert asyncio.all_tasks() == before
        assert cpu_slices == 3
        assert [e.kind for e in result.errors] == [ProviderErrorKind.BAD_RESPONSE]
        assert {k[1] for b in result.batches for k in b.keys} == {Resource.MEMORY}
    finally:
        await engine.close()


async def test_a_cold_start_parses_one_slice_at_a_time(prometheus_factory, monkeypatch) -> None:
    """A cold start asks for each resource's slices oldest first, one at a time, the next
    while the last is parsed, and parses one slice at a time: it holds one slice's parsing
    and two answers per resource at most, never the whole retention's."""
    now, history, engine, prom_provider = cold_provider(prometheus_factory)
    real_ask = prom_provider._ask
    real_parse = provider.parse_answer  # type: ignore[attr-defined]
    metric_of = {Resource.CPU: CPU_METRIC, Resource.MEMORY: MEM_METRIC}
    lock = threading.Lock()
    asking = {CPU_METRIC: 0, MEM_METRIC: 0}  # asked, not answered yet
    held = dict(asking)  # answered, not parsed yet
    most_asking, most_held = dict(asking), dict(asking)
    answered_ahead = dict(asking)  # answers that came while the last was not yet parsed
    asked: dict[str, list[str]] = {CPU_METRIC: [], MEM_METRIC: []}
    parsing: list[str] = []
    most_parsing = 0

    async def counting_ask(promql: str, at: str) -> Any:
        metric = promql.split("[")[0]
        with lock:
            asking[metric] += 1
            most_asking[metric] = max(most_asking[metric], asking[metric])
            asked[metric].append(promql)
        try:
            return await real_ask(promql, at)
        finally:
            with lock:
                asking[metric] -= 1
                held[metric] += 1
                answered_ahead[metric] += held[metric] > 1
                most_held[metric] = max(most_held[metric], held[metric])

    def counting_parse(body: bytes, resource: Resource, *args: Any, **kwargs: Any) -> Any:
        nonlocal most_parsing
        metric = metric_of[resource]
        with lock:
            parsing.append(metric)
            most_parsing = max(most_parsing, len(parsing))
        try:
            time.sleep(0.02)  # long enough for the next slice's answer to arrive meanwhile
            return real_parse(body, resource, *args, **kwargs)
        finally:
            with lock:
                parsing.remove(metric)
                held[metric] -= 1

    monkeypatch.setattr(prom_provider, "_ask", counting_ask)
    monkeypatch.setattr(provider, "parse_answer", counting_parse)
    try:
        result = await prom_provider.fetch(now, None)
        assert not result.errors
        cold = spans.slices(now, 1020)
        for metric in (CPU_METRIC, MEM_METRIC):
            assert asked[metric] == [f"{metric}[{s}s]" for s, _ in cold]
            assert most_asking[metric] == 1
            assert most_held[metric] == 2
            assert answered_ahead[metric] >= len(cold) // 2
        assert most_parsing == 1
        assert len(result.batches) == 2 * len(cold)
        assert {k for b in result.batches for k in b.keys} == {
            (node, r) for node in node_names(history) for r in (Resource.CPU, Resource.MEMORY)
        }
        # Later polls: one answer per resource, asked side by side.
        asked = {CPU_METRIC: [], MEM_METRIC: []}
        await prom_provider.fetch(now + 15, now)
        assert [len(a) for a in asked.values()] == [1, 1]
    finally:
        await engine.close()


async def test_a_poll_after_a_long_gap_asks_in_slices_and_loses_nothing(
    prometheus_factory, monkeypatch
) -> None:
    """After an outage the gap since the newest sample held is asked for in slices, as a
    cold start's retention is: one answer of it would grow with the outage (at 65,000 nodes
    past provider.max_answer_bytes at every later poll). Every sample of the gap arrives."""
    now = time.time()
    history = node_history(3, math.floor(now) - 1, span_s=1800)
    prom = prometheus_factory(openmetrics_text(history))
    engine = prometheus_engine(prom.url, **CPU_AND_MEMORY_ONLY)
    assert isinstance(engine.provider, provider.PrometheusProvider)
    asked: list[str] = []
    real_ask = engine.provider._ask

    async def recording(promql: str, at: str) -> Any:
        asked.append(promql)
        return await real_ask(promql, at)

    monkeypatch.setattr(engine.provider, "_ask", recording)
    try:
        await engine.cycle(now - 700)  # then the backend is out of reach for 700 s
        asked.clear()
        await engine.cycle(now)
        gap = [q for q in asked if q.startswith(CPU_METRIC + "[")]
        assert len(gap) == math.ceil((700 + 60) / spans.BACKFILL_SLICE_S), gap
        cols, keys = engine.store.columns, engine.store.keys
        for name, labels, samples in history:
            resource = Resource.CPU if name == CPU_METRIC else Resource.MEMORY
            sid = keys.index((node_name(labels["instance"], True), resource))
            held = cols.ts[cols.sid == sid]
            expected = [t for t, _ in samples if now - 1020 <= t <= now]
            assert held.tolist() == pytest.approx(expected), (name, labels)
    finally:
        await engine.close()
