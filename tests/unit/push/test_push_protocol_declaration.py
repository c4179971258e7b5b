"""A push protocol is one declaration: a dummy protocol, declared in this file alone, is
routed, authenticated as a writer, listed in OpenAPI and published; the built-in
protocols' routes are the ones docs/push.md lists.

The service is the real one (``app.build_engine``, ``app.build_receiver``,
``api.make_app``); only the protocol is the test's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadwatcher import app
from loadwatcher.config import Settings
from loadwatcher.http import api
from loadwatcher.http.security import TokenFile
from loadwatcher.push import protocol
from loadwatcher.push.errors import PushError, PushErrorKind
from loadwatcher.push.protocol import Pending, PushProtocol, PushRequest, QueryParam, Route
from loadwatcher.push.samples import Decoded, Part, to_batch
from tests.support.service import settings

T = 1_700_000_000.0
DOCS = Path(__file__).resolve().parents[3] / "docs" / "push.md"


class CsvMapper:
    """``node,cpu_percent,memory_percent`` per line, at the receive time."""

    def check(self, request: PushRequest) -> None:
        if request.query.get("unit", "percent") != "percent":
            raise PushError(PushErrorKind.BAD_PRECISION, "unit: expected percent")

    def read(self, body: bytes, request: PushRequest, max_decoded_bytes: int) -> Pending:
        rows = [line.split(",") for line in body.decode().splitlines() if line]

        def work(now: float) -> Decoded:
            names = [r[0] for r in rows for _ in (0, 1)]
            n = len(names)
            values = np.array([float(v) for r in rows for v in r[1:3]], np.float64)
            part = Part(
                names,
                np.arange(n, dtype=np.int64),
                np.tile(np.array([0, 1], np.int64), len(rows)),
                np.full(n, now, np.float64),
                values,
            )
            merged = to_batch([part])
            counts = {"samples": n, "accepted": n}
            return Decoded(merged, counts, frozenset(r[0] for r in rows))

        return Pending(len(rows), work)


def _build(settings: Settings) -> CsvMapper:
    return CsvMapper()


DUMMY = PushProtocol(
    name="csv",
    title="csv",
    routes=(
        Route(
            "/api/csv/push",
            "node,cpu,memory per line",
            "text/csv",
            encodings=frozenset({""}),
            encoding_hint=" none",
            query=(QueryParam("unit", ("percent",)),),
        ),
    ),
    sections=(),
    build=_build,
    statuses={PushErrorKind.BAD_PRECISION: 422},
)


@pytest.fixture
def dummy() -> Iterator[PushProtocol]:
    protocol.register(DUMMY)
    try:
        yield DUMMY
    finally:
        protocol.unregister(DUMMY.name)


async def test_a_protocol_declared_in_one_file_is_routed_authenticated_listed_and_published(
    aiohttp_client: Any, dummy: PushProtocol, tmp_path: Path
) -> None:
    writers, readers = tmp_path / "writers", tmp_path / "readers"
    writers.write_text("push-secret\n")
    readers.write_text("read-secret\n")
    config = settings(
        {"METRICS_PROVIDER_NAME": "push", "LOADWATCHER_PUSH_TOKEN_FILE": str(writers)}
    )
    engine = app.build_engine(config)
    receiver = app.build_receiver(config, engine)
    assert receiver is not None
    receiver.clock = lambda: T
    client = await aiohttp_client(
        api.make_app(engine, tokens=TokenFile(str(readers)), receiver=receiver)
    )
    path = "/api/csv/push"
    assert path in protocol.writer_paths()
    # Authenticated as a writer: the readers' token neither lets it in nor is asked for.
    resp = await client.post(path, data=b"n1,40,60\n", headers={"Authorization": "Bearer x"})
    assert resp.status == 401
    assert (await resp.json())["error"] == "unauthorized"
    resp = await client.post(
        path, data=b"n1,40,60\n", headers={"Authorization": "Bearer read-secret"}
    )
    assert resp.status == 401
    writer = {"Authorization": "Bearer push-secret"}
    # The protocol's status table and its route's encodings apply.
    resp = await client.post(path, data=b"n1,1,1\n", headers=writer, params={"unit": "ratio"})
    assert resp.status == 422
    assert (await resp.json())["error"] == "bad_precision"
    resp = await client.post(
        path, data=b"n1,1,1\n", headers={**writer, "Content-Encoding": "x-custom"}
    )
    assert resp.status == 400
    assert (await resp.json())["message"] == "csv needs Content-Encoding none"
    resp = await client.post(path, data=b"n1,40,60\n", headers=writer)
    assert resp.status == 204
    metrics = engine.metrics.registry
    assert (
        metrics.get_sample_value(
            "loadwatcher_push_requests_total", {"route": path, "status": "204"}
        )
        == 1
    )
    await engine.cycle(T + 1)
    resp = await client.get("/watcher/n1", headers={"Authorization": "Bearer read-secret"})
    assert resp.status == 200
    latest = {
        m["type"]: m["value"]
        for m in (await resp.json())["data"]["NodeMetricsMap"]["n1"]["metrics"]
        if m["operator"] == "Latest"
    }
    assert latest == {"CPU": 40.0, "Memory": 60.0}
    # Listed in OpenAPI with its content type, parameter and statuses.
    resp = await client.get("/openapi.json", headers={"Authorization": "Bearer read-secret"})
    doc = await resp.json()
    op = doc["paths"][path]["post"]
    assert list(op["requestBody"]["content"]) == ["text/csv"]
    assert op["parameters"][0]["schema"]["enum"] == ["percent"]
    assert {"204", "401", "422", "429"} <= set(op["responses"])


def test_a_protocol_cannot_take_a_route_another_has() -> None:
    clash = PushProtocol(
        name="clash",
        title="clash",
        routes=(Route("/write", "", "text/plain", frozenset({""}), " none"),),
        sections=(),
        build=_build,
        statuses={},
    )
    with pytest.raises(ValueError, match="/write already routed"):
        protocol.register(clash)
    assert "clash" not in {p.name for p in protocol.protocols()}


def test_docs_list_exactly_the_declared_routes() -> None:
    """docs/push.md's endpoint table is the declarations' routes, and the sections each
    protocol reads are named there."""
    text = DOCS.read_text()
    listed = set(re.findall(r"^\| `POST ([^?` ]+)", text, re.MULTILINE))
    declared = {r.path for p in protocol.protocols() for r in p.routes}
    assert listed == declared
    for p in protocol.protocols():
        for section in p.sections:
            assert f"`{section}." in text, (p.name, section)


def test_the_declared_routes_are_the_ones_the_service_serves() -> None:
    config = settings({"METRICS_PROVIDER_NAME": "push"})
    receiver = app.build_receiver(config, app.build_engine(config))
    assert receiver is not None
    assert receiver.paths == protocol.writer_paths()
    assert receiver.paths == {"/api/v1/write", "/write", "/api/v2/write"}


class FailingMapper(CsvMapper):
    def read(self, body: bytes, request: PushRequest, max_decoded_bytes: int) -> Pending:
        def work(now: float) -> Decoded:
            raise RuntimeError("a bug in a mapping")

        return Pending(1, work)


async def test_a_fault_of_the_service_is_a_counted_500_without_a_traceback(
    aiohttp_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    failing = PushProtocol(
        name="failing",
        title="failing",
        routes=(Route("/api/failing", "", "text/plain", frozenset({""}), " none"),),
        sections=(),
        build=lambda settings: FailingMapper(),
        statuses={},
    )
    protocol.register(failing)
    try:
        config = settings({"METRICS_PROVIDER_NAME": "push"})
        engine = app.build_engine(config)
        receiver = app.build_receiver(config, engine)
        assert receiver is not None
        client = await aiohttp_client(api.make_app(engine, receiver=receiver))
        resp = await client.post("/api/failing", data=b"x")
        assert resp.status == 500
        assert await resp.json() == {"error": "internal", "message": "the push could not be taken"}
        assert (
            engine.metrics.registry.get_sample_value(
                "loadwatcher_push_requests_total", {"route": "/api/failing", "status": "500"}
            )
            == 1
        )
        assert "a bug in a mapping" in caplog.text  # the cause is logged, not answered
    finally:
        protocol.unregister("failing")
