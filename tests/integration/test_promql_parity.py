"""The query API against a real Prometheus holding the same samples: a table of queries
(selectors with every matcher type, offsets, ranges, the ``*_over_time`` functions,
arithmetic, comparisons, set operators, aggregations, instant and range) must answer the
same on both. Then the Python ``prometheus-api-client`` reads every endpoint.

The same remote-write body goes to Prometheus's receiver (``--web.enable-remote-write-
receiver``) and to the service's (in-process, ``provider.name: push``). The samples run
over 14 minutes at about 15 s with millisecond jitter; one node stops 7 minutes before the
end (it leaves the lookback), one starts 3 minutes before it; one node's CPU series ends
with a staleness marker 5 minutes before the end (it leaves instant queries at once), and
another's memory series ends with one 8 minutes before and starts again 4 minutes later;
values are multiples of
about n/61 (so that sums and means round in their last bits), exact through the service's
percent, and distinct across nodes at each time so that ``topk``'s choice is defined.
Values compare exactly: the evaluator adds in Prometheus's order with its compensated
sums, so the answers agree to the last bit, as text.
"""

from __future__ import annotations

import asyncio
import json
import math
import struct
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import cramjam
import pytest

from loadwatcher import app
from loadwatcher.http import api
from tests.support.backends import Server, get_json, http_request, require_binary
from tests.support.remote_write import push, write_request
from tests.support.service import settings

pytestmark = pytest.mark.backend

CPU, MEM = "instance:node_cpu:ratio", "instance:node_memory_utilisation:ratio"
NODES = [f"node-{i}" for i in range(6)]
# Prometheus's staleness marker, as a writer sends it when a series ends.
STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0_0000_0000_0002))[0]


def ratio(n: int) -> float:
    """About n/61: a value whose last bits sums and means round, but that the service's
    percent gives back exactly (x · 100 / 100 == x holds for most doubles, not all)."""
    v = n / 61
    while v * 100.0 / 100.0 != v:
        v = math.nextafter(v, 1.0)
    return v


def samples(end: int) -> list[tuple[str, dict[str, str], list[tuple[float, float]]]]:
    out = []
    for i, node in enumerate(NODES):
        cpu: list[tuple[float, float]] = []
        mem: list[tuple[float, float]] = []
        for k in range(57):
            t = end - 840 + 15 * k + ((i * 37 + k * 11) % 900) / 1000  # ms jitter
            if node == "node-4" and t > end - 420:
                continue
            if node == "node-5" and t < end - 180:
                continue
            if node == "node-3" and t > end - 300:
                if cpu[-1][1] is not STALE:
                    cpu.append((t, STALE))
            else:
                cpu.append((t, ratio((7 * i + 3 * k) % 61 + 1)))
            if node == "node-2" and end - 480 < t < end - 240:
                if mem[-1][1] is not STALE:
                    mem.append((t, STALE))
                continue
            mem.append((t, ratio((5 * i + 11 * k) % 59 + 2)))
        out.append((CPU, {"instance": node}, cpu))
        out.append((MEM, {"instance": node}, mem))
    return out


SELECTORS = [
    CPU,
    f'{CPU}{{instance="node-1"}}',
    f'{CPU}{{instance!="node-1"}}',
    f'{CPU}{{instance=~"node-[0-2]"}}',
    f'{CPU}{{instance!~"node-[0-2]|node-5"}}',
    '{__name__=~"instance:node_.*", instance="node-3"}',
    f"{CPU} offset 1m",
    f"{MEM} offset -30s",
]
FUNCTIONS = [
    f"{f}({CPU}[{r}])"
    for f in (
        "avg_over_time",
        "min_over_time",
        "max_over_time",
        "sum_over_time",
        "count_over_time",
        "last_over_time",
        "stddev_over_time",
        "stdvar_over_time",
        "present_over_time",
    )
    for r in ("5m", "90s")
] + [
    f"quantile_over_time(0.9, {MEM}[5m])",
    f"quantile_over_time(0.5, {CPU}[2m] offset 30s)",
    f"avg_over_time({MEM}[10m] offset 2m)",
    f"abs({CPU} - 0.5)",
    f"clamp({CPU}, 0.2, 0.6)",
    f"clamp_min({MEM}, 0.5)",
    f"clamp_max({MEM}, 0.5)",
    f'label_replace({CPU}, "node", "n$1", "instance", "node-(.*)")',
    "time()",
    "vector(1)",
    f"scalar(sum({CPU}))",
]
AGGREGATIONS = [
    f"sum({CPU})",
    f"avg({MEM})",
    f"min by (instance) ({CPU})",
    f"max({CPU})",
    f"count({CPU})",
    f"topk(2, {CPU})",
    f"bottomk(2, {MEM})",
    f"quantile(0.5, {CPU})",
    f"quantile(0.9, {MEM})",
    f"sum without (instance) ({CPU})",
    'count by (__name__) ({__name__=~"instance:.*"})',
    f"avg(avg_over_time({CPU}[5m]))",
]
OPERATORS = [
    f"{CPU} > 0.5",
    f"{CPU} > bool 0.5",
    f"0.3 < {CPU}",
    f"{CPU} * 100",
    f"1 - {MEM}",
    f"-{CPU}",
    f"{CPU} + {MEM}",
    f"{CPU} > on(instance) {MEM}",
    f"{CPU} >= bool on(instance) {MEM}",
    f"{CPU} / ignoring(job) {MEM}",
    f"{CPU} and on(instance) ({MEM} > 0.5)",
    f"{CPU} or {MEM}",
    f"{CPU} unless on(instance) ({MEM} > 0.5)",
    f"{CPU} - on() group_left sum({CPU})",
    "1 + 2 * 3",
    "2 ^ 3 % 5",
    "5 > bool 3",
]
QUERIES = SELECTORS + FUNCTIONS + AGGREGATIONS + OPERATORS


class Pair:
    def __init__(self, prom: Server, service: str, end: int) -> None:
        self.prom, self.service, self.end = prom, service, end


@pytest.fixture
def prometheus(prometheus_factory) -> Iterator[Server]:
    yield prometheus_factory(extra_args=["--web.enable-remote-write-receiver"])


@pytest.fixture
async def pair(prometheus: Server, aiohttp_server: Any) -> Pair:
    env = {"METRICS_PROVIDER_NAME": "push", "LOADWATCHER_JOURNAL_PATH": ""}
    engine = app.build_engine(settings(env))
    receiver = app.build_receiver(settings(env), engine)
    assert receiver is not None
    server = await aiohttp_server(api.make_app(engine, receiver=receiver))
    url = str(server.make_url("")).rstrip("/")
    end = math.floor(time.time()) - 2
    body = samples(end)
    push(prometheus, body)
    async with aiohttp.ClientSession() as session:
        resp = await session.post(
            url + "/api/v1/write",
            data=bytes(cramjam.snappy.compress_raw(write_request(body))),
            headers={"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf"},
        )
        assert resp.status == 204, await resp.text()
    await engine.cycle(time.time())
    assert engine.current is not None
    return Pair(prometheus, url, end)


def normalised(data: dict[str, Any]) -> Any:
    """The answer with series keyed by their labels, values as floats (NaN as a string)."""

    def f(text: str) -> Any:
        v = float(text)
        return "NaN" if math.isnan(v) else v

    kind, result = data["resultType"], data["result"]
    if kind in ("scalar", "string"):
        return kind, (result[0], f(result[1]) if kind == "scalar" else result[1])
    if kind == "vector":
        return kind, {
            tuple(sorted(r["metric"].items())): (r["value"][0], f(r["value"][1])) for r in result
        }
    return kind, {
        tuple(sorted(r["metric"].items())): [(t, f(v)) for t, v in r["values"]] for r in result
    }


def assert_same(ours: Any, theirs: Any, query: str) -> None:
    assert ours[0] == theirs[0], query
    if isinstance(theirs[1], dict):
        assert set(ours[1]) == set(theirs[1]), query
        for key, want in theirs[1].items():
            assert_values(ours[1][key], want, query)
    else:
        assert_values(ours[1], theirs[1], query)


def assert_values(got: Any, want: Any, query: str) -> None:
    if isinstance(want, list):
        assert [t for t, _ in got] == [t for t, _ in want], query
        for (_, a), (_, b) in zip(got, want, strict=True):
            assert_values_one(a, b, query)
    else:
        assert got[0] == pytest.approx(want[0], abs=1e-6), query
        assert_values_one(got[1], want[1], query)


def assert_values_one(a: Any, b: Any, query: str) -> None:
    if isinstance(b, str) or isinstance(a, str):
        assert a == b, query
    else:
        assert a == b, query


def both(pair: Pair, path: str, params: dict[str, str]) -> tuple[Any, Any]:
    theirs = get_json(pair.prom.url + path, params)
    ours = get_json(pair.service + path, params)
    assert theirs["status"] == ours["status"] == "success"
    return ours["data"], theirs["data"]


async def test_instant_queries_answer_as_prometheus(pair: Pair) -> None:
    checked = empty = 0
    # node-4's last sample exactly 5 minutes before: on the lookback's and [5m]'s edge.
    edge = samples(pair.end)[8][2][-1][0] + 300
    for at in (pair.end, pair.end - 200.5, pair.end - 400, pair.end - 837.25, edge):
        for query in [*QUERIES, f"{CPU}[1m]", f"{MEM}[30s] offset 1m"]:
            ours, theirs = await _both(pair, "/api/v1/query", {"query": query, "time": str(at)})
            assert_same(normalised(ours), normalised(theirs), f"{query} @ {at}")
            checked += 1
            empty += theirs["result"] == []
    assert checked == 5 * (len(QUERIES) + 2)
    assert empty <= checked // 10  # the table compares answers, not mostly empty ones


async def test_range_queries_answer_as_prometheus(pair: Pair) -> None:
    windows = [
        (pair.end - 840, pair.end, "15s"),
        (pair.end - 900.5, pair.end + 30, "60"),
        (pair.end - 700, pair.end - 100, "37s"),
    ]
    for start, end, step in windows:
        for query in QUERIES:
            params = {"query": query, "start": str(start), "end": str(end), "step": step}
            ours, theirs = await _both(pair, "/api/v1/query_range", params)
            assert_same(normalised(ours), normalised(theirs), f"{query} {start}..{end}/{step}")


async def test_the_range_cap_is_prometheus_own(pair: Pair) -> None:
    """11,001 points per series are answered, one more is bad_data, on both."""
    for steps, status in ((11_000, "success"), (11_001, "error")):
        params = {"query": "1", "start": str(pair.end - steps), "end": str(pair.end), "step": "1"}

        def ask(base: str, params: dict[str, str] = params) -> Any:
            _, body = http_request("GET", base + "/api/v1/query_range", params=params)
            return json.loads(body)

        ours = await asyncio.to_thread(ask, pair.service)
        theirs = await asyncio.to_thread(ask, pair.prom.url)
        assert ours["status"] == theirs["status"] == status, steps
        if status == "error":
            assert ours["errorType"] == theirs["errorType"] == "bad_data"


async def test_series_and_labels_answer_as_prometheus(pair: Pair) -> None:
    match = {"match[]": f'{CPU}{{instance=~"node-[1-4]"}}'}
    ours, theirs = await _both(pair, "/api/v1/series", match)
    assert sorted(map(str, ours)) == sorted(map(str, theirs))
    ours, theirs = await _both(pair, "/api/v1/label/instance/values", match)
    assert ours == theirs == ["node-1", "node-2", "node-3", "node-4"]
    ours, theirs = await _both(pair, "/api/v1/labels", match)
    assert ours == theirs == ["__name__", "instance"]


async def test_the_rollups_are_prometheus_own_over_time(pair: Pair) -> None:
    """The rollup series serve the numbers of /watcher, which are Prometheus's own
    ``*_over_time`` over the window that ends at the snapshot's (whole) second."""
    ours = (
        await asyncio.to_thread(
            get_json,
            pair.service + "/api/v1/query",
            {"query": 'loadwatcher_node_cpu_utilisation_ratio{window="5m", operator="avg"}'},
        )
    )["data"]["result"]
    # node-3's CPU ended 5 minutes before, node-4 7 minutes before: no 5-minute window.
    assert {r["metric"]["instance"] for r in ours} == set(NODES) - {"node-3", "node-4"}
    taken = ours[0]["value"][0]
    theirs = get_json(
        pair.prom.url + "/api/v1/query",
        {"query": f"avg_over_time({CPU}[5m])", "time": str(math.floor(taken))},
    )["data"]["result"]
    want = {r["metric"]["instance"]: float(r["value"][1]) for r in theirs}
    assert set(want) == set(NODES) - {"node-3", "node-4"}
    for r in ours:
        assert float(r["value"][1]) == pytest.approx(want[r["metric"]["instance"]], rel=1e-9)


async def _both(pair: Pair, path: str, params: dict[str, str]) -> tuple[Any, Any]:
    # The service runs on this event loop: ask it from a thread, as Prometheus is asked.
    return await asyncio.to_thread(both, pair, path, params)


async def test_prometheus_api_client_reads_every_endpoint(pair: Pair) -> None:
    from prometheus_api_client import PrometheusConnect

    def read() -> None:
        client = PrometheusConnect(url=pair.service, disable_ssl=True)
        assert client.check_prometheus_connection()
        names = client.all_metrics()
        assert CPU in names and "loadwatcher_node_cpu_utilisation_ratio" in names
        assert "instance" in client.get_label_names()
        assert client.get_label_values("instance") == NODES
        series = client.get_series(
            _dt(pair.end - 60),
            _dt(pair.end),
            params={"match[]": f'{CPU}{{instance="node-1"}}'},
        )
        assert series == [{"__name__": CPU, "instance": "node-1"}]
        now = client.custom_query(f'{CPU}{{instance="node-1"}}', params={"time": pair.end})
        # Sample 56 is at end + its jitter, after the query's time: sample 55 answers.
        assert now[0]["value"][1] == str(ratio((7 * 1 + 3 * 55) % 61 + 1))
        ranged = client.custom_query_range(
            f'{MEM}{{instance="node-2"}}',
            start_time=_dt(pair.end - 60),
            end_time=_dt(pair.end),
            step="15",
        )
        assert len(ranged[0]["values"]) == 5
        current = client.get_current_metric_value(CPU, {"instance": "node-0"})
        assert current[0]["metric"]["instance"] == "node-0"
        built = client._session.get(pair.service + "/api/v1/status/buildinfo").json()
        assert built["status"] == "success"

    await asyncio.to_thread(read)


def _dt(t: float) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC)


async def test_promtool_reads_the_service_as_it_reads_prometheus(pair: Pair) -> None:
    """``promtool query`` (Prometheus's own Go client: POST form bodies) prints the same
    lines for the service as for Prometheus."""
    promtool = require_binary("promtool")
    at, start = str(pair.end), str(pair.end - 120)
    commands = [
        ["instant", f"--time={at}", "{server}", f'{CPU}{{instance=~"node-[0-3]"}}'],
        ["instant", f"--time={at}", "{server}", f"topk(2, avg_over_time({MEM}[5m]))"],
        ["instant", f"--time={at}", "{server}", "1 + time()"],
        ["range", f"--start={start}", f"--end={at}", "--step=30s", "{server}", f"sum({CPU})"],
        ["series", f"--match={CPU}", "{server}"],
        ["labels", f"--match={MEM}", "{server}", "instance"],
    ]

    def run(server: str, args: list[str]) -> list[str]:
        argv = [promtool, "query", *(a.replace("{server}", server) for a in args)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, (argv, done.stderr)
        return sorted(done.stdout.splitlines())

    for args in commands:
        ours = await asyncio.to_thread(run, pair.service, args)
        theirs = await asyncio.to_thread(run, pair.prom.url, args)
        assert ours == theirs, args
        assert ours, args
