"""The status page at ``GET /``: served by the real app, checked as HTML and in Chromium.

The fleet tests poll a real Prometheus seeded with 500 nodes (480 fresh, 20 whose samples
stopped 7 minutes ago, so they are stale, and one whose name is hostile HTML) and compare
the page with what ``/watcher`` serves. The browser test runs Debian's ``chromium``
headless against a real aiohttp server on a loopback port, reads the DOM it built and
saves a screenshot under ``$ARTIFACTS_DIR`` (else ``<tmp>/artifacts``).
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import struct
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from backends import Series, openmetrics_text, require_binary
from service import prometheus_engine, settings
from synth import node_history

from loadwatcher import app
from loadwatcher.engine import Engine
from loadwatcher.http import api, statuspage, statusrows

HOSTILE = 'evil<script>alert("x")</script>&node'
FRESH_NODES = 480
STALE_NODES = 20
CHROMIUM_TIMEOUT_S = 60.0


# --------------------------------------------------------------------------- page parsing


@dataclass
class PageRow:
    node: str
    quality: str = ""
    values: list[str] = field(default_factory=list)
    titles: list[str] = field(default_factory=list)


class Page(HTMLParser):
    """The rows of ``table#nodes`` (one per ``tr[data-node]``), and every element id."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[PageRow] = []
        self.ids: set[str] = set()
        self.scripts = 0
        self._row: PageRow | None = None
        self._in_value = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "script":
            self.scripts += 1
        if tag == "tr" and "data-node" in a:
            self._row = PageRow(a["data-node"])
            self.rows.append(self._row)
        elif self._row is not None and tag == "span" and "badge" in a.get("class", ""):
            self._row.quality = a["class"].split("q-", 1)[1]
        elif self._row is not None and tag == "td" and "v" in a.get("class", "").split():
            self._in_value = True
            self._row.values.append("")
            self._row.titles.append(a.get("title", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._in_value = False
        elif tag == "tr":
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._in_value and self._row is not None:
            self._row.values[-1] += data

    def by_node(self) -> dict[str, PageRow]:
        return {r.node: r for r in self.rows}


# --------------------------------------------------------------------------- the service


def fleet_history(now: float) -> list[Series]:
    """480 fresh nodes, 20 stale ones (10.9.0.x) and one with a hostile name."""
    end = math.floor(now) - 2
    fresh = node_history(FRESH_NODES, end, span_s=1000.0)
    stale = []
    for name, labels, samples in node_history(STALE_NODES, end - 420, span_s=580.0, seed=3):
        host = labels["instance"].rsplit(":", 1)[0].replace("10.0.0.", "10.9.0.")
        stale.append((name, {**labels, "instance": f"{host}:9100"}, samples))
    evil = [
        (name, {**labels, "instance": f"{HOSTILE}:9100"}, samples)
        for name, labels, samples in node_history(1, end, span_s=1000.0, seed=11)
    ]
    return fresh + stale + evil


@pytest.fixture
async def fleet(prometheus_factory, aiohttp_client) -> AsyncIterator[tuple[TestClient, Engine]]:
    now = time.time()
    prom = prometheus_factory(openmetrics_text(fleet_history(now)))
    engine = prometheus_engine(prom.url)
    await engine.cycle(now)
    client = await aiohttp_client(api.make_app(engine))
    yield client, engine
    await engine.close()


async def watcher_nodes(client: TestClient, window: str) -> dict[str, Any]:
    resp = await client.get("/watcher", params={"window": window})
    assert resp.status == 200
    nodes: dict[str, Any] = (await resp.json())["data"]["NodeMetricsMap"]
    return nodes


def avg(entry: dict[str, Any], wire_type: str) -> float:
    return next(
        m["value"] for m in entry["metrics"] if m["type"] == wire_type and m["operator"] == "AVG"
    )


# --------------------------------------------------------------------------- without a backend


async def test_before_the_first_poll_the_page_says_so(aiohttp_client) -> None:
    engine = app.build_engine(settings({}))
    client = await aiohttp_client(api.make_app(engine))
    resp = await client.get("/")
    assert resp.status == 200
    assert resp.content_type == "text/html" and resp.charset == "utf-8"
    text = await resp.text()
    page = Page(text)
    assert "no-snapshot" in page.ids and page.rows == []
    assert '<meta http-equiv="refresh" content="15">' in text
    assert "unhealthy" in text  # no snapshot yet is not healthy
    await engine.close()


async def test_host_provider_node_is_listed_with_its_quality(aiohttp_client) -> None:
    engine = app.build_engine(settings({"LOADWATCHER_POLL_INTERVAL_S": "2"}))
    await engine.cycle()
    await engine.cycle(engine.clock() + 1)
    client = await aiohttp_client(api.make_app(engine))
    resp = await client.get("/")
    assert resp.headers["Content-Security-Policy"].startswith("default-src 'none'")
    text = await resp.text()
    page = Page(text)
    served = await watcher_nodes(client, "5m")
    assert [r.node for r in page.rows] == list(served)
    row = page.rows[0]
    assert row.quality == served[row.node]["tags"]["quality"]
    # CPU then memory, 5m/10m/15m each: the memory 5m cell is the API's AVG to 0.1.
    assert float(row.values[3]) == pytest.approx(avg(served[row.node], "Memory"), abs=0.051)
    assert page.scripts == 0
    assert f'content="{statuspage.MIN_REFRESH_S}"' in text  # 2 s polls: refresh floor
    # The filter survives in the sort links, URL-encoded and then HTML-escaped.
    filtered = await (await client.get("/", params={"q": 'a b&c#"'})).text()
    assert '?sort=cpu&amp;q=a%20b%26c%23%22"' in filtered
    assert Page(filtered).rows == []
    await engine.close()


def test_bands_cover_the_percent_range() -> None:
    assert [statusrows.band(v) for v in (0, 19.9, 20, 45, 60, 80, 90, 100)] == [
        0,
        0,
        1,
        2,
        3,
        4,
        5,
        5,
    ]


# --------------------------------------------------------------------------- a real fleet


@pytest.mark.backend
async def test_page_shows_every_node_the_api_serves(fleet) -> None:
    client, _ = fleet
    resp = await client.get("/")
    assert resp.status == 200
    text = await resp.text()
    page = Page(text)
    rows = page.by_node()
    served = {w: await watcher_nodes(client, w) for w in ("5m", "10m", "15m")}
    assert set(rows) == set(served["15m"])
    assert len(rows) == FRESH_NODES + STALE_NODES + 1
    for node, entry in list(served["15m"].items())[::37]:
        row = rows[node]
        assert row.quality == entry["tags"]["quality"]
        for i, window in enumerate(("5m", "10m", "15m")):
            for offset, wire_type in ((0, "CPU"), (3, "Memory")):
                shown = row.values[offset + i]
                if node in served[window]:
                    want = avg(served[window][node], wire_type)
                    assert float(shown) == pytest.approx(want, abs=0.051), (node, window)
                    assert "P95" in row.titles[offset + i]
                else:
                    assert shown == "·"  # no sample in that window


@pytest.mark.backend
async def test_stale_nodes_get_a_stale_badge_and_health_agrees(fleet) -> None:
    client, _ = fleet
    page = Page(await (await client.get("/")).text())
    stale_on_page = {r.node for r in page.rows if r.quality == "stale"}
    assert stale_on_page == {f"10.9.0.{j}" for j in range(1, STALE_NODES + 1)}
    health = await (await client.get("/watcher/health")).json()
    assert set(health["snapshot"]["staleNodes"]) == stale_on_page
    # 20 stale nodes of 501 are within health.max_bad_node_share: degraded, shown apart.
    assert health["status"] == "degraded"
    badge = '<div class="status warn" id="health">degraded</div>'
    assert badge in (await (await client.get("/")).text())


@pytest.mark.backend
async def test_hostile_node_names_are_escaped(fleet) -> None:
    client, _ = fleet
    text = await (await client.get("/")).text()
    assert "<script>" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;node" in text
    page = Page(text)
    assert page.scripts == 0
    assert HOSTILE in page.by_node()  # the name survives, as text


@pytest.mark.backend
async def test_sort_and_filter(fleet) -> None:
    client, _ = fleet
    served = await watcher_nodes(client, "15m")
    page = Page(await (await client.get("/", params={"sort": "cpu"})).text())
    cpu = [avg(served[r.node], "CPU") for r in page.rows]
    assert cpu == sorted(cpu, reverse=True)
    page = Page(await (await client.get("/", params={"sort": "quality"})).text())
    assert {r.quality for r in page.rows[:STALE_NODES]} == {"stale"}
    page = Page(await (await client.get("/", params={"q": "10.9.0."})).text())
    assert len(page.rows) == STALE_NODES
    page = Page(await (await client.get("/", params={"sort": "name", "q": "x" * 999})).text())
    assert page.rows == []  # an absurd filter matches nothing


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("bogus=1", "bad_parameter"),
        ("sort=bogus", "bad_sort"),
        ("sort=cpu&sort=name", "bad_parameter"),
        ("q=a&q=../../x", "bad_parameter"),
    ],
)
async def test_page_parameters_are_checked_as_the_api_does(aiohttp_client, query, code) -> None:
    engine = app.build_engine(settings({}))
    client = await aiohttp_client(api.make_app(engine))
    resp = await client.get(f"/?{query}")
    assert resp.status == 400 and resp.content_type == "application/json"
    body = await resp.json()
    assert body["error"] == code and isinstance(body["message"], str)
    assert "../" not in body["message"]
    await engine.close()


# --------------------------------------------------------------------------- in Chromium


def chromium_binary() -> str:
    return require_binary("chromium")


def artifacts_dir(tmp_path: Path) -> Path:
    root = os.environ.get("ARTIFACTS_DIR")
    path = Path(root) if root else tmp_path / "artifacts"
    path.mkdir(parents=True, exist_ok=True)
    return path


async def run_chromium(binary: str, profile: Path, *args: str) -> str:
    """Run headless Chromium to completion without blocking the loop that serves the page."""
    profile.mkdir(parents=True, exist_ok=True)
    proc = await asyncio.create_subprocess_exec(
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--no-proxy-server",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), CHROMIUM_TIMEOUT_S)
    except TimeoutError:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        pytest.fail(f"chromium did not finish within {CHROMIUM_TIMEOUT_S:.0f} s")
    assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    return out.decode()


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.backend
async def test_chromium_renders_the_fleet_and_takes_a_screenshot(fleet, tmp_path) -> None:
    binary = chromium_binary()
    client, engine = fleet
    served = await watcher_nodes(client, "15m")
    runner = web.AppRunner(api.make_app(engine), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        url = f"http://127.0.0.1:{port}/"
        dom = await run_chromium(binary, tmp_path / "profile-dom", "--dump-dom", url)
        page = Page(dom)
        assert set(page.by_node()) == set(served)
        assert {"health", "provider", "snapshot-age", "nodes"} <= page.ids
        out = artifacts_dir(tmp_path)
        shots = {"status-page.png": url, "status-page-by-quality.png": url + "?sort=quality"}
        for name, target in shots.items():
            await run_chromium(
                binary,
                tmp_path / f"profile-{name}",
                f"--screenshot={out / name}",
                "--window-size=1440,900",
                target,
            )
            assert png_size(out / name) == (1440, 900)
            assert (out / name).stat().st_size > 20_000  # a page, not a blank window
    finally:
        await runner.cleanup()
