"""Hostile input for every provider parser and for the configuration loader.

The Prometheus parser is fuzzed in test_parser_fuzz.py. Here: InfluxQL answers
(``influxql.statement_results`` / ``points_by_host`` / ``last_values``), Flux records and
the annotated CSV that ``influxdb-client`` parses for ``FluxBackend`` (served by a local
HTTP server, so the client's real parser runs), Kubernetes lists, NodeList and
NodeMetricsList items (``metrics_server``), and ``config.resolve`` / ``config.load`` with
bad YAML, bad types and bad values. Only ``ProviderError`` and ``ConfigError`` may come
out; whatever a parser accepts must end up as finite percentages in the store.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loadwatcher import config
from loadwatcher.errors import ConfigError, ProviderError
from loadwatcher.model import WINDOWS, Resource, Series, SeriesBatch
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.providers import registry
from loadwatcher.providers.http import HttpSettings
from loadwatcher.providers.influxdb import flux, influxql
from loadwatcher.providers.influxdb.telegraf import FieldQuery, to_series
from loadwatcher.providers.kube import client, metrics_server
from tests.support.fuzzing import examples
from tests.support.synth import one_window

FUZZ = settings(max_examples=examples(200), deadline=None)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["NaN", "+Inf", "1e400", "-0", "0.5", "abc", "", "1700000000000000000"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def ingest(series: list[Series]) -> None:
    """What the engine does with a parser's output: nothing bad may reach a rollup.

    The store reads the same series as one ``SeriesBatch`` exactly as it reads them one
    by one (the Prometheus parser hands it batches).
    """
    store = SampleStore()
    added = store.add(series)
    batched = SampleStore()
    again = batched.add([SeriesBatch.of(series)])
    assert batched.keys == store.keys and again.dropped == added.dropped
    assert np.array_equal(batched.columns.ts, store.columns.ts)
    assert np.array_equal(batched.columns.val, store.columns.val)
    cols = store.columns
    assert np.all(np.isfinite(cols.val)) and np.all(np.isfinite(cols.ts))
    assert np.all((cols.val >= 0) & (cols.val <= 101))
    for window in WINDOWS:
        stats = one_window(cols, window, 2_000_000_000)
        for values in stats.values.values():
            assert all(math.isfinite(v) and 0 <= v <= 101 for v in values.tolist())


# --------------------------------------------------------------------------- InfluxQL

ns_times = st.one_of(
    st.integers(min_value=0, max_value=2**63 - 1),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["1700000000000000000", "x", None, True]),
    json_values,
)
rows = st.one_of(
    st.tuples(ns_times, st.one_of(st.floats(), st.none(), st.integers(), json_values)).map(list),
    json_values,
)
influx_series = st.one_of(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(["cpu", "mem"]),
            "tags": st.one_of(
                st.fixed_dictionaries({"host": st.sampled_from(["n1", "n2", "", "n/3"])}),
                json_values,
            ),
            "columns": st.just(["time", "usage_idle"]),
            "values": st.one_of(st.lists(rows, max_size=6), json_values),
        }
    ),
    json_values,
)
influx_docs = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "results": st.one_of(
                st.lists(
                    st.one_of(
                        st.fixed_dictionaries(
                            {
                                "statement_id": st.integers(0, 3),
                                "series": st.one_of(
                                    st.lists(influx_series, max_size=4), json_values
                                ),
                            }
                        ),
                        st.fixed_dictionaries(
                            {"error": st.one_of(st.text(max_size=30), json_values)}
                        ),
                        json_values,
                    ),
                    max_size=3,
                ),
                json_values,
            )
        }
    ),
)


@FUZZ
@given(influx_docs)
@example({"results": [{"series": [{"tags": {"host": "n1"}, "values": [{"a": 1}]}]}]})
@example({"results": [{"series": [{"tags": {"host": "n1"}, "values": [[[1, 2], [3, 4]]]}]}]})
@example({"results": [{"series": [{"tags": {"host": "n1"}, "values": [[1, [2, 3]]]}]}]})
def test_influxql_answers(doc: Any) -> None:
    try:
        statements = influxql.statement_results(doc, "q", "telegraf")
        series = statements[0] if statements else []
        points = influxql.points_by_host(series, "host", "q")
        influxql.last_values(series, "host")
    except ProviderError as exc:
        assert str(exc)
        return
    for host, (ts, val) in points.items():
        assert isinstance(host, str) and ts.ndim == 1 and ts.shape == val.shape
    for idle in (True, False):
        ingest(to_series(Resource.CPU, points, 1.0, idle))


# --------------------------------------------------------------------------- Flux records

times = st.one_of(
    st.datetimes(timezones=st.none() | st.just(dt.UTC)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(),
    st.text(max_size=10),
    st.none(),
)
flux_rows = st.lists(
    st.tuples(
        st.one_of(st.sampled_from(["n1", "n2", ""]), scalars),
        times,
        st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), scalars),
    ),
    max_size=8,
)


@FUZZ
@given(flux_rows)
@example([("n1", 10**400, 1.0)])
@example([("n1", 1.0, 10**400)])
def test_flux_records(rows_: list[tuple[Any, Any, Any]]) -> None:
    try:
        points = flux.points_from_rows(rows_, "q")
    except ProviderError as exc:
        assert str(exc)
        return
    ingest(to_series(Resource.MEMORY, points, 1.0, False))


@FUZZ
@given(st.integers(), st.one_of(st.none(), st.text(max_size=40), st.binary(max_size=40)))
@example("abc", "x")
def test_flux_http_errors(status: Any, body: Any) -> None:
    from influxdb_client.rest import ApiException

    exc = ApiException(status=status, reason="r")
    exc.body = body
    assert str(flux._api_error(exc, "http://x", "b", "q"))


class _CsvServer(ThreadingHTTPServer):
    body = b""


class _CsvHandler(BaseHTTPRequestHandler):
    server: _CsvServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "text/csv; charset=utf-8")
        self.send_header("Content-Length", str(len(self.server.body)))
        self.end_headers()
        self.wfile.write(self.server.body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def csv_server() -> Iterator[_CsvServer]:
    server = _CsvServer(("127.0.0.1", 0), _CsvHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


DATATYPES = [
    "dateTime:RFC3339",
    "dateTime:RFC3339Nano",
    "double",
    "long",
    "unsignedLong",
    "string",
    "boolean",
    "duration",
    "base64Binary",
    "nonsense",
    "",
]
cells = st.one_of(
    st.sampled_from(
        [
            "2024-05-01T12:00:05Z",
            "2024-05-01T12:00:05.123456789Z",
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59Z",
            "2024-13-45T99:99:99Z",
            "0.5",
            "NaN",
            "+Inf",
            "-1e400",
            "99999999999999999999999",
            "true",
            "n1",
            "",
            '"a,b"',
            '"unterminated',
            "=",
        ]
    ),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12),
)


@st.composite
def annotated_csv(draw: st.DrawFn) -> bytes:
    columns = draw(
        st.lists(st.sampled_from(["_time", "_value", "host", "result", "table", "x"]), max_size=4)
    )
    ncols = len(columns)
    types = draw(st.lists(st.sampled_from(DATATYPES), min_size=ncols, max_size=ncols))
    lines = [
        "#group,false,false,"
        + ",".join(draw(st.sampled_from(["true", "false", "x"])) for _ in columns),
        "#datatype,string,long," + ",".join(types),
        "#default,_result,," + ",".join("" for _ in columns),
        ",result,table," + ",".join(columns),
    ]
    lines = draw(st.lists(st.sampled_from(lines), max_size=6)) if draw(st.booleans()) else lines
    for _ in range(draw(st.integers(0, 4))):
        row = draw(st.lists(cells, min_size=0, max_size=ncols + 2))
        lines.append(",," + draw(st.sampled_from(["0", "1", "x", ""])) + "," + ",".join(row))
    if draw(st.booleans()):
        lines += ["#datatype,string,long", ",error,reference", f",{draw(cells)},{draw(cells)}"]
    text = "\r\n".join(lines) + "\r\n\r\n"
    return text.encode() if draw(st.booleans()) else draw(st.binary(max_size=80))


@pytest.mark.filterwarnings("ignore:The response contains columns with duplicated names")
@settings(
    max_examples=examples(80),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(body=annotated_csv())
def test_flux_annotated_csv_through_the_real_client(csv_server: _CsvServer, body: bytes) -> None:
    csv_server.body = body
    url = f"http://127.0.0.1:{csv_server.server_address[1]}"

    async def fetch() -> None:
        backend = flux.FluxBackend(HttpSettings(url, token="t", timeout_s=5), "b", "org")
        try:
            points = await backend.points(FieldQuery(Resource.CPU, "cpu", "v"), "host", 0, 10**19)
        except ProviderError as exc:
            assert str(exc)
            return
        finally:
            await backend.close()
        ingest(to_series(Resource.CPU, points, 1.0, True))

    asyncio.run(fetch())


# --------------------------------------------------------------------------- metrics-server

quantities = st.one_of(
    st.sampled_from(["250m", "4", "16Gi", "1e3", "1e400", "1e-1000", "0", "-1", "1.5.5", "Ki", ""]),
    st.from_regex(r"\A[+-]?[0-9]{0,4}(\.[0-9]{0,3})?([numkMGTPE]|[KMGTPE]i|e[+-]?[0-9]{1,4})?\Z"),
    scalars,
    json_values,
)
resource_lists = st.one_of(
    st.fixed_dictionaries({"cpu": quantities, "memory": quantities}),
    json_values,
)
names = st.one_of(st.sampled_from(["n1", "n2", ""]), scalars)
node_items = st.one_of(
    st.fixed_dictionaries(
        {
            "metadata": st.one_of(st.fixed_dictionaries({"name": names}), json_values),
            "status": st.one_of(
                st.fixed_dictionaries({"capacity": resource_lists, "allocatable": resource_lists}),
                json_values,
            ),
        }
    ),
    json_values,
)
metric_items = st.one_of(
    st.fixed_dictionaries(
        {
            "metadata": st.one_of(st.fixed_dictionaries({"name": names}), json_values),
            "timestamp": st.one_of(
                st.sampled_from(
                    [
                        "2024-05-01T12:00:05Z",
                        "0001-01-01T00:00:00+14:00",
                        "9999-12-31T23:59:59-14:00",
                    ]
                ),
                st.datetimes().map(lambda d: d.isoformat()),
                scalars,
            ),
            "usage": resource_lists,
        }
    ),
    json_values,
)
lists = st.one_of(
    st.fixed_dictionaries(
        {
            "items": st.one_of(
                st.lists(st.one_of(node_items, metric_items), max_size=4), json_values
            ),
            "metadata": st.one_of(st.fixed_dictionaries({"continue": scalars}), json_values),
        }
    ),
    json_values,
)


@FUZZ
@given(lists, lists, st.sampled_from(["capacity", "allocatable"]))
@example(
    {"items": [{"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "1", "memory": "1"}}}]},
    {"items": [{"metadata": {"name": "n1"}, "usage": {"cpu": "1e400", "memory": "1e400"}}]},
    "capacity",
)
def test_metrics_server_lists(nodes_doc: Any, metrics_doc: Any, percent_of: str) -> None:
    try:
        node_list, _ = client.list_page(nodes_doc, "GET /api/v1/nodes")
        metric_list, _ = client.list_page(metrics_doc, "GET /apis/metrics.k8s.io/v1beta1/nodes")
        nodes = metrics_server.parse_nodes(node_list)
        usage = metrics_server.parse_node_metrics(metric_list)
        result = metrics_server.to_result(nodes, usage, 1_700_000_000.0, percent_of)
    except ProviderError as exc:
        assert str(exc)
        return
    ingest(result.series)
    for info in result.node_info.values():
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in info.items())


@FUZZ
@given(
    st.integers(100, 599),
    st.one_of(st.binary(max_size=60), json_values.map(lambda v: yaml.safe_dump(v).encode())),
)
def test_kubernetes_error_answers(status: int, body: bytes) -> None:
    assert str(client.status_error(status, body, "GET /api/v1/nodes"))


# --------------------------------------------------------------------------- configuration

CATALOGUE = registry.catalogue()
SETTING_KEYS = [spec.key for spec in CATALOGUE.specs]
ENV_NAMES = [name for spec in CATALOGUE.specs for name in (spec.env_name, *spec.env)]
FLAG_NAMES = [spec.flag for spec in CATALOGUE.specs if spec.flag]
nasty_text = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        [
            "",
            "0",
            "-1",
            "1e999",
            "nan",
            "inf",
            "99999",
            "true",
            "maybe",
            "http://x",
            "a\x00b",
            "a" * 300,
            "9" * 4400,
            "/dev/null",
            "/",
            " prometheus ",
            "cpu=",
            "=x,y",
        ]
    ),
)
yaml_scalars = st.one_of(
    scalars,
    st.dates(),
    st.datetimes(),
    st.binary(max_size=8),
    st.sampled_from(["a" * 300, "a\x00b", "9" * 4400, "http://x", "/dev/null"]),
)


@st.composite
def yaml_documents(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 3))
    if kind == 0:  # a well-formed file with bad values, types and structure
        doc: dict[Any, Any] = {}
        for key in draw(st.lists(st.sampled_from(SETTING_KEYS), max_size=6)):
            section, name = key.split(".", 1)
            doc.setdefault(section, {})[name] = draw(st.one_of(yaml_scalars, json_values))
        if draw(st.booleans()):
            doc[draw(st.one_of(st.text(max_size=8), st.integers()))] = draw(json_values)
        return yaml.safe_dump(doc) if draw(st.booleans()) else yaml.dump(doc)
    if kind == 1:  # hand-made trouble
        return draw(
            st.sampled_from(
                [
                    "server:\n  port: 2001-13-45\n",
                    "poll:\n  interval_s: 2024-02-30\n",
                    "[" * 600,
                    "a: " + "[" * 600 + "]" * 600,
                    "? [a, b]\n: 1\n",
                    "server: !!python/object/apply:os.system ['true']\n",
                    "server:\n  host: !!binary AAAA\n",
                    "server: &a\n  host: x\nprovider: *a\n",
                    "server:\n  port: *nope\n",
                    "\ufeffserver:\n\tport: 1\n",
                    "server: {port: 1, port: 2}\n",
                    "server:\n  port: !!float nan\n",
                    "<<: {server: {port: 1}}\n",
                    "server:\n  <<: 1\n",
                    "- a\n- b\n",
                    "just text",
                    "%YAML 9.9\n---\na: 1\n",
                    "\x00\x01\x02",
                ]
            )
        )
    if kind == 2:
        return yaml.safe_dump(draw(json_values))
    return draw(st.text(max_size=200))


@FUZZ
@given(
    yaml_documents(),
    st.dictionaries(st.sampled_from(ENV_NAMES), nasty_text, max_size=4),
    st.dictionaries(st.sampled_from(FLAG_NAMES), st.one_of(st.none(), nasty_text), max_size=3),
)
@example("server:\n  port: 2001-13-45\n", {}, {})
@example("[" * 600, {}, {})
@example(None, {"LOADWATCHER_PROVIDER_TOKEN_FILE": "a" * 300}, {})
def test_config_resolve(yaml_text: str | None, env: dict[str, str], flags: dict[str, Any]) -> None:
    try:
        settings_ = config.resolve(yaml_text, env, flags, catalogue=CATALOGUE)
    except ConfigError as exc:
        assert exc.setting and exc.message and "\n" not in str(exc).strip()
        return
    assert isinstance(settings_.server.port, int)


@FUZZ
@given(st.one_of(nasty_text, st.sampled_from(["/", "/proc/self/mem", "/dev/null", ".", "/bin/sh"])))
def test_config_load_of_any_path(path: str) -> None:
    try:
        config.load(path, {}, {}, catalogue=CATALOGUE)
    except ConfigError as exc:
        assert str(exc)


def test_config_load_reads_a_file(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("server:\n  port: 2021\n")
    assert config.load(str(good), {}, {}).server.port == 2021
