"""Sample values as a real Prometheus writes them, and one bad value in a real answer.

A real Prometheus never writes a bad value, so the hostile answers come from a small
loopback HTTP server that serves an answer recorded from the real Prometheus with one value
altered (byte for byte the rest, so the fast bytes path reads it; or re-indented, so the
plain JSON path does).
"""

from __future__ import annotations

import math
import re
import time
import urllib.parse
import urllib.request

import numpy as np
import orjson
import pytest
from aiohttp import web

from loadwatcher.model import Resource
from loadwatcher.pipeline.plausible import unparsable
from loadwatcher.providers.prometheus import jsonbytes
from loadwatcher.providers.prometheus.answer import ParseMemo, parse_answer
from tests.support.backends import openmetrics_text
from tests.support.service import prometheus_engine
from tests.support.synth import CPU_METRIC, MEM_METRIC, node_history, node_names

pytestmark = pytest.mark.backend

# Plain decimals, the magnitudes where Prometheus switches to exponent form, the words.
VALUES = [0.5, -5.0, 0.0, 123456.789, 1e21, 1.5e21, 9.99e20, 1e-7, 1e-6, 9.99e-7, 1e308]
VALUES += [5e-324, -2.5e-300, math.nan, math.inf, -math.inf]


def recorded(url: str, query: str, at: float) -> bytes:
    """The body of ``/api/v1/query`` as the real server writes it."""
    params = urllib.parse.urlencode({"query": query, "time": f"{at:.3f}"})
    with urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=10) as response:
        body: bytes = response.read()
    return body


def test_every_value_a_real_prometheus_writes_is_read_exactly(prometheus_factory) -> None:
    end = math.floor(time.time()) - 60
    times = [end - 15 * (len(VALUES) - k) for k in range(len(VALUES))]
    series = [("odd_values", {"instance": "n:9100"}, list(zip(times, VALUES, strict=True)))]
    prom = prometheus_factory(openmetrics_text(series))
    body = recorded(prom.url, "odd_values[1000s]", end)
    # What it writes: exponent form from 1e21 on and below 1e-6 (Go's 'e' format).
    for text in (b'"1e+21"', b'"1.5e+21"', b'"1e-07"', b'"5e-324"', b'"NaN"', b'"+Inf"'):
        assert text in body
    assert b'"999000000000000000000"' in body and b'"0.000001"' in body
    memo = ParseMemo()
    batch, _ = parse_answer(body, Resource.CPU, 1.0, memo, "q")
    split = jsonbytes.split_samples(body)
    assert split is not None and memo.layout(Resource.CPU, split.without_samples) is not None
    assert not unparsable(batch.values).any()
    want = np.array(VALUES)
    assert batch.values[~np.isnan(want)].tolist() == want[~np.isnan(want)].tolist()
    assert np.isnan(batch.values[np.isnan(want)]).all()


def altered(body: bytes, index: int, value: bytes) -> bytes:
    """``body`` with the value text of its ``index``-th sample replaced by ``value``."""
    match = list(re.finditer(rb'\[[0-9.]+,"([^"]*)"\]', body))[index]
    return body[: match.start(1)] + value + body[match.end(1) :]


@pytest.mark.parametrize("bad", [b"0x10", b"", b"1e", b"--1", b"0.1_0"])
@pytest.mark.parametrize("indent", [False, True])
async def test_one_bad_value_in_a_real_answer_is_one_dropped_sample(
    prometheus_factory, aiohttp_server, bad: bytes, indent: bool
) -> None:
    now = time.time()
    history = node_history(3, math.floor(now) - 1)
    prom = prometheus_factory(openmetrics_text(history))
    answers = {
        metric: recorded(prom.url, f"{metric}[1020s]", now) for metric in (CPU_METRIC, MEM_METRIC)
    }
    answers[CPU_METRIC] = altered(answers[CPU_METRIC], 100, bad)
    if indent:
        answers[CPU_METRIC] = orjson.dumps(
            orjson.loads(answers[CPU_METRIC]), option=orjson.OPT_INDENT_2
        )

    async def query(request: web.Request) -> web.Response:
        metric = CPU_METRIC if CPU_METRIC in request.query["query"] else MEM_METRIC
        return web.Response(body=answers[metric], content_type="application/json")

    application = web.Application()
    application.router.add_get("/api/v1/query", query)
    server = await aiohttp_server(application)
    engine = prometheus_engine(str(server.make_url("")).rstrip("/"))
    try:
        await engine.cycle(now)
        assert engine.provider_status.ok
        snap = engine.current.snapshot if engine.current else None
        assert snap is not None and snap.resources == {Resource.CPU, Resource.MEMORY}
        assert snap.nodes == node_names(history)
        held = sum(1 for _, _, pts in history for t, _ in pts if now - 1020 < t <= now)
        assert len(engine.store.columns) == held - 1
        dropped = engine.metrics.registry.get_sample_value
        assert dropped("loadwatcher_samples_dropped_total", {"reason": "unparsable"}) == 1
        assert dropped("loadwatcher_samples_dropped_total", {"reason": "non_finite"}) == 0
    finally:
        await engine.close()
