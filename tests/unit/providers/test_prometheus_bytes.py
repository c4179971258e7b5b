"""The Prometheus answer read from bytes (the fast path): tricky layouts, the layout memo, the
store's batches, and HTTP errors worded as before. Randomised checks are in
test_parser_fuzz.py; these are the cases worth naming."""

from __future__ import annotations

import time

import numpy as np
import orjson
import pytest
from aiohttp import web

from loadwatcher.errors import ProviderError
from loadwatcher.model import FetchResult, Resource, Series, SeriesBatch
from loadwatcher.pipeline.plausible import unparsable
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.providers.base import collect
from loadwatcher.providers.http import HttpBackend, HttpSettings
from loadwatcher.providers.prometheus import jsonbytes
from loadwatcher.providers.prometheus.answer import ParseMemo, parse_answer, parse_matrix
from loadwatcher.providers.prometheus.provider import PrometheusOptions, PrometheusProvider, Query
from loadwatcher.providers.prometheus.spans import slices

HEAD = b'{"status":"success","data":{"resultType":"matrix","result":['
TAIL = b"]}}"


def body(*items: bytes) -> bytes:
    return HEAD + b",".join(items) + TAIL


def item(instance: str, *samples: tuple[str, str]) -> bytes:
    pairs = ",".join(f'[{t},"{v}"]' for t, v in samples)
    return (
        f'{{"metric":{{"instance":{orjson.dumps(instance).decode()}}},"values":[{pairs}]}}'.encode()
    )


def both(text: bytes, memo: ParseMemo | None = None) -> tuple[SeriesBatch, bool]:
    """The parse and whether it took the bytes path; asserts it equals the JSON path."""
    memo = memo or ParseMemo()
    got, unlabelled = parse_answer(text, Resource.CPU, 100.0, memo, "q")
    want, unlabelled_json = parse_matrix(orjson.loads(text), Resource.CPU, 100.0, ParseMemo(), "q")
    assert (got.keys, got.lengths.tolist(), unlabelled) == (
        want.keys,
        want.lengths.tolist(),
        unlabelled_json,
    )
    assert got.ts.view(np.int64).tolist() == want.ts.view(np.int64).tolist()
    assert got.values.view(np.int64).tolist() == want.values.view(np.int64).tolist()
    split = jsonbytes.split_samples(text)
    return got, split is not None and memo.layout(Resource.CPU, split.without_samples) is not None


@pytest.mark.parametrize(
    ("text", "fast"),
    [
        (body(item("10.0.0.1:9100", ("1700000000", "0.5"), ("1700000015.5", "0.25"))), True),
        (body(item('"values":[[1,"2"]]', ("1", "0.5"))), True),  # escaped inside a label
        (body(item("x]]", ("1", "0.5")), item("y", ("2", "0.75"))), True),
        (body(item("y", ("1", "0.5")), item("x]]", ("2", "0.75"))), False),  # "]]" in a label
        (body(item("\\", ("1", "0.5"))), True),
        (body(item("é\u2028", ("1", "0.5"))), True),
        (body(item("a", ("1", "NaN"), ("2", "+Inf"), ("3", "-Inf"), ("4", "1e-3"))), True),
        (body(item("a", ("1", "-0"), ("2", "007.50"), ("3", "12345678901234567890"))), True),
        (body(item("a", ("1", "0x10"), ("2", "1e"), ("3", "--1"), ("4", "0.1_0"))), True),
        (body(item("a", ("1", "0.5")), item("b", ("1", ""), ("2", "0.5"))), False),
        (body(b'{"metric":{"instance":"a"},"values":[[1,0.5],[2,null],[3,[1]]]}'), False),
        (body(item("a", ("1", "1e+21"), ("2", "1e-07"), ("3", "-1.5E-300"), ("4", "00"))), True),
        (body(item("a", ("1.000", "0.1"), ("0", "0.2"), ("-5", "0.3"), ("1e3", "0.4"))), True),
        (body(b'{"metric":{"instance":"a"},"values":[]}', item("b", ("1", "0.5"))), False),
        (body(b'{"values":[[1,"0.5"]],"metric":{"instance":"a"}}'), True),
        (body(b'{"metric": {"instance": "a"}, "values": [[1, "0.5"]]}'), False),
        (body(b'{"metric":{"instance":"a"},"\\u0076alues":[[1,"0.5"]]}'), False),
        (body(b'{"metric":{"instance":"a","a\\"values":[[9,"9"]]},"values":[[1,"0.5"]]}'), False),
        (body(b'{"metric":{"instance":"a"},"values":[[1,"0.5"]],"histograms":[[1,{}]]}'), False),
        (body(b'{"metric":{"job":"x"},"values":[[1,"0.5"]]}', item("b", ("2", "0.5"))), True),
    ],
)
def test_layouts(text: bytes, fast: bool) -> None:
    """Equal to the JSON path either way; the bytes path where the layout is the usual one."""
    _, took_bytes = both(text)
    assert took_bytes is fast


@pytest.mark.parametrize(
    "text",
    [
        body(item("a", ("1", "0.5"))).replace(b'"success"', b'"error","error":"boom"'),
        body(item("a", ("1", "0.5"))).replace(b'"matrix"', b'"vector"'),
        body(b'{"metric":"a","values":[[1,"0.5"]]}'),
        body(b'{"metric":{"instance":"a"},"values":[[01,"0.5"]]}'),  # not JSON
        body(b'{"metric":{"instance":"a"},"values":[[1,"0.5" 5]]}'),  # not JSON
        body(b'{"metric":{"instance":"a"},"values":[[1,"\t0.5"]]}'),  # not JSON
        body(b'{"metric":{"instance":"a"},"values":[[1,"0.5"],]}'),  # not JSON
        b"null",
        b"<html>",
    ],
)
def test_errors_are_worded_as_by_the_json_path(text: bytes) -> None:
    def outcome(parse) -> str:
        try:
            parse()
        except ProviderError as exc:
            return str(exc)
        except orjson.JSONDecodeError:
            return "not JSON"
        return "accepted"

    memo = ParseMemo()
    got = outcome(lambda: parse_answer(text, Resource.CPU, 100.0, memo, "q"))
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        doc = None
    want = (
        outcome(lambda: parse_matrix(doc, Resource.CPU, 100.0, ParseMemo(), "q"))
        if doc is not None
        else "not JSON"
    )
    assert got == want != "accepted"


def test_remembered_layout_still_reads_new_numbers() -> None:
    memo = ParseMemo()
    first, fast = both(body(item("a:1", ("1", "0.5")), item("b:1", ("1", "0.25"))), memo)
    assert fast
    second, fast = both(body(item("a:1", ("2", "0.75")), item("b:1", ("2", "1"))), memo)
    assert fast and second.keys is first.keys  # the layout was reused, not decoded again
    assert second.values.tolist() == [75.0, 100.0] and second.ts.tolist() == [2.0, 2.0]
    third, fast = both(body(item("a:1", ("3", "0.5")), item("c:1", ("3", "0.5"))), memo)
    assert fast and [k[0] for k in third.keys] == ["a", "c"]


def test_one_node_under_two_jobs_keeps_the_later_series_at_equal_times() -> None:
    a = b'{"metric":{"instance":"n:9100","job":"a"},"values":[[1,"0.1"],[2,"0.2"]]}'
    b = b'{"metric":{"instance":"n:9100","job":"b"},"values":[[2,"0.3"],[3,"0.4"]]}'
    batch, fast = both(body(a, b))
    assert fast and batch.keys == [("n", Resource.CPU)] * 2
    store = SampleStore()
    store.add([batch])
    assert store.keys == [("n", Resource.CPU)]
    assert store.columns.ts.tolist() == [1.0, 2.0, 3.0]
    assert store.columns.val.tolist() == pytest.approx([10.0, 30.0, 40.0])


def test_store_reads_batches_exactly_as_series() -> None:
    rng = np.random.default_rng(3)
    series = []
    for i in range(40):
        n = int(rng.integers(0, 6))
        ts = np.sort(rng.choice(np.arange(100.0), n, replace=False))
        values = rng.choice([5.0, 50.0, 150.0, -1.0, np.nan, np.inf], n)
        series.append(Series(f"n{i % 25}", [Resource.CPU, Resource.MEMORY][i % 2], ts, values))
    old, new = SampleStore(), SampleStore()
    a, b = old.add(series[:20]), new.add([SeriesBatch.of(series[:10]), *series[10:20]])
    c, d = old.add(series[20:]), new.add([SeriesBatch.of(series[20:])])
    assert old.keys == new.keys
    for x, y in ((a, b), (c, d)):
        assert x.dropped == y.dropped
        assert x.added.sid.tolist() == y.added.sid.tolist()
    assert old.columns.ts.tolist() == new.columns.ts.tolist()
    assert old.columns.val.tolist() == new.columns.val.tolist()


def test_empty_series_get_no_id() -> None:
    store = SampleStore()
    empty = np.empty(0)
    batch = SeriesBatch(
        [("a", Resource.CPU), ("b", Resource.CPU)],
        np.array([0, 1]),
        np.array([1.0]),
        np.array([5.0]),
    )
    store.add([Series("z", Resource.CPU, empty, empty), batch])
    assert store.keys == [("b", Resource.CPU)]


def test_collect_knows_the_nodes_of_batches() -> None:
    batch = SeriesBatch([("a", Resource.CPU)], np.array([0]), np.empty(0), np.empty(0))
    series = [Series("b", Resource.MEMORY, np.array([1.0]), np.array([2.0]))]
    result = collect([(batch, None), (series, "note")])
    assert isinstance(result, FetchResult)
    assert result.known_nodes == {"a", "b"} and result.batches == [batch]
    assert result.series == series and result.notices == ["note"]


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (401, '{"error":"no"}'),
        (403, ""),
        (404, "gone"),
        (400, '{"status":"error","errorType":"bad_data","error":"parse error at char 3"}'),
        (422, '{"status":"error","error":"query timed out"}'),
        (503, "overloaded"),
        (418, "teapot"),
        (200, "<html>proxy</html>"),
        (200, "null"),
        (200, ""),
    ],
)
async def test_http_errors_read_as_with_request_json(aiohttp_server, status, text) -> None:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=status, text=text, content_type="application/json")

    application = web.Application()
    application.router.add_get("/api/v1/query", answer)
    server = await aiohttp_server(application)
    settings = HttpSettings(address=str(server.make_url("")).rstrip("/"))
    options = PrometheusOptions(queries=(Query(Resource.CPU, "custom_metric", 100.0),))
    provider = PrometheusProvider(settings, options)
    plain = HttpBackend(settings)
    try:
        with pytest.raises(ProviderError) as got:
            await provider.fetch(time.time(), None)
        # A cold start asks for its oldest slice first.
        first = f"custom_metric[{slices(0.0, 1020)[0][0]}s]"
        with pytest.raises(ProviderError) as want:
            doc = await plain.request_json("GET", "/api/v1/query", params={}, query=first)
            parse_matrix(doc, Resource.CPU, 100.0, ParseMemo(), first)
        assert (got.value.kind, str(got.value)) == (want.value.kind, str(want.value))
    finally:
        await provider.close()
        await plain.close()


def test_one_bad_value_is_one_unparsable_sample() -> None:
    """The other samples and series of the answer are kept; the bad one is counted."""
    good = [(str(t), f"0.{t}") for t in range(1, 10)]
    for bad in ("0x10", "", "1e", "--1", "0.1_0", "+1", "007", " 1", "inf", "١"):
        samples = [*good[:4], ("5", bad), *good[5:]]
        batch, _ = both(body(item("a:1", *good), item("b:1", *samples), item("c:1", *good)))
        assert batch.keys == [("a", Resource.CPU), ("b", Resource.CPU), ("c", Resource.CPU)]
        assert unparsable(batch.values).tolist() == [False] * 13 + [True] + [False] * 13
        result = SampleStore().add([batch])
        assert len(result.added) == 26
        assert result.dropped == {"non_finite": 0, "negative": 0, "over_100": 0, "unparsable": 1}


def test_store_counts_unparsable_apart_from_non_finite() -> None:
    batch, _ = both(body(item("a", ("1", "NaN"), ("2", "x"), ("3", "+Inf"), ("4", "0.5"))))
    result = SampleStore().add([batch])
    assert result.dropped == {"non_finite": 2, "negative": 0, "over_100": 0, "unparsable": 1}
    assert result.added.val.tolist() == [50.0]


async def test_answers_are_asked_for_uncompressed(aiohttp_server) -> None:
    """Compressing a poll's answer costs Prometheus more CPU than sending it (90 against
    160 ms a poll at 5,000 nodes, benchmarks/RESULTS.md): the provider asks for identity."""
    asked: list[str | None] = []

    async def answer(request: web.Request) -> web.Response:
        # The poll's range queries; an empty one is then explained with a few small queries
        # (rules.Diagnosis), whose encoding does not matter.
        if "[" in request.query.get("query", ""):
            asked.append(request.headers.get("Accept-Encoding"))
        doc = {"status": "success", "data": {"resultType": "matrix", "result": []}}
        return web.Response(body=orjson.dumps(doc), content_type="application/json")

    application = web.Application()
    application.router.add_get("/api/v1/query", answer)
    server = await aiohttp_server(application)
    settings = HttpSettings(address=str(server.make_url("")).rstrip("/"))
    options = PrometheusOptions(queries=(Query(Resource.CPU, "custom_metric", 100.0),))
    provider = PrometheusProvider(settings, options)
    try:
        await provider.fetch(time.time(), time.time() - 15)
    finally:
        await provider.close()
    assert asked == ["identity"]
