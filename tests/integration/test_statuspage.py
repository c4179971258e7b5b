"""The status page at ``GET /``: served by the real app, checked as HTML and in Chromium.

The fleet tests poll a real Prometheus seeded with 1,000 nodes: 955 fresh, 30 whose samples
stopped 7 minutes ago (stale, ``10.9.0.x``), 10 whose values never change (frozen,
``10.8.0.x``), 4 that send some values over 100 % (dropped by the store and counted,
``10.7.0.x``) and one whose name is hostile HTML; they compare the page with what
``/watcher`` serves. The browser tests run Debian's ``chromium`` headless against a real
aiohttp server on a loopback port, read the DOM it built and save screenshots under
``$ARTIFACTS_DIR`` (else ``<tmp>/artifacts``); under ``CI=true`` a missing Chromium fails.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import os
import re
import signal
import struct
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from loadwatcher import app
from loadwatcher.engine import Engine
from loadwatcher.http import api, statuslist, statuspage, statusrows
from loadwatcher.http.security import TokenFile
from tests.support.backends import Series, openmetrics_text, require_binary
from tests.support.service import prometheus_engine, settings
from tests.support.synth import node_history

HOSTILE = 'evil<script>alert("x")</script>&node'
FRESH_NODES = 955
STALE_NODES = 30
FROZEN_NODES = 10
OVER_NODES = 4
ALL_NODES = FRESH_NODES + STALE_NODES + FROZEN_NODES + OVER_NODES + 1
PROBLEM_NODES = STALE_NODES + FROZEN_NODES
CHROMIUM_TIMEOUT_S = 90.0
FIGURES = ("Latest", "AVG", "P95", "MAX", "STD")
NO_SAMPLE = "no sample in the window"


# --------------------------------------------------------------------------- page parsing


@dataclass
class PageRow:
    node: str
    quality: str = ""
    values: list[str] = field(default_factory=list)
    sparks: int = 0  # svg.spark elements with a path
    href: str = ""

    def figures(self, resource: int) -> dict[str, str]:
        """The figures of resource 0 (CPU) or 1 (memory): {} when the window has none."""
        groups, cells = [], list(self.values)
        while cells:
            take = 1 if cells[0] == NO_SAMPLE else len(FIGURES) + 1
            groups.append(cells[:take])
            cells = cells[take:]
        group = groups[resource]
        return {} if group[0] == NO_SAMPLE else dict(zip((*FIGURES, "n"), group, strict=True))


class Page(HTMLParser):
    """The rows of ``table#nodes`` (one per ``tr[data-node]``), every element id, the sort
    links, the charts and the text of a few elements by id."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[PageRow] = []
        self.ids: set[str] = set()
        self.scripts = 0
        self.charts = 0  # svg.chart (a node's view)
        self.sort_links: dict[str, str] = {}
        self.links: list[str] = []
        self.text: dict[str, str] = {}
        self._row: PageRow | None = None
        self._in_value = False
        self._in_spark = False
        self._open: list[tuple[str, str]] = []  # (tag, id) of the elements whose text is kept
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = a.get("class", "").split()
        if "id" in a:
            self.ids.add(a["id"])
            self.text.setdefault(a["id"], "")
            self._open.append((tag, a["id"]))
        if tag == "script":
            self.scripts += 1
        if tag == "a":
            self.links.append(a.get("href", ""))
            if "data-sort" in a:
                self.sort_links[a["data-sort"]] = a["href"]
        if tag == "svg" and "chart" in classes:
            self.charts += 1
        if tag == "tr" and "data-node" in a:
            self._row = PageRow(a["data-node"])
            self.rows.append(self._row)
        elif self._row is None:
            return
        elif tag == "a" and not self._row.href:
            self._row.href = a.get("href", "")
        elif tag == "span" and "badge" in classes:
            self._row.quality = a["class"].split("q-", 1)[1]
        elif tag == "td" and "v" in classes:
            self._in_value = True
            self._row.values.append("")
        elif tag == "svg" and "spark" in classes:
            self._in_spark = True
        elif tag == "path" and self._in_spark:
            self._row.sparks += 1
            self._in_spark = False

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._in_value = False
        elif tag == "tr":
            self._row = None
        elif tag == "svg":
            self._in_spark = False
        if self._open and self._open[-1][0] == tag:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if self._in_value and self._row is not None:
            self._row.values[-1] += data
        for _, element_id in self._open:
            self.text[element_id] += data

    def by_node(self) -> dict[str, PageRow]:
        return {r.node: r for r in self.rows}


# --------------------------------------------------------------------------- the service


def fleet_history(now: float) -> list[Series]:
    """The 1,000 nodes of the module docstring."""
    end = math.floor(now) - 2
    fresh = node_history(FRESH_NODES, end, span_s=1000.0)

    def renamed(series: list[Series], prefix: str) -> list[Series]:
        out: list[Series] = []
        for name, labels, samples in series:
            host = labels["instance"].rsplit(":", 1)[0].replace("10.0.0.", prefix)
            out.append((name, {**labels, "instance": f"{host}:9100"}, samples))
        return out

    stale = renamed(node_history(STALE_NODES, end - 420, span_s=580.0, seed=3), "10.9.0.")
    frozen = [
        (name, labels, [(t, round(samples[0][1], 3)) for t, _ in samples])
        for name, labels, samples in renamed(
            node_history(FROZEN_NODES, end, span_s=1000.0, seed=5), "10.8.0."
        )
    ]
    over = [
        (name, labels, [(t, 1.5 if k % 10 == 3 else v) for k, (t, v) in enumerate(samples)])
        for name, labels, samples in renamed(
            node_history(OVER_NODES, end, span_s=1000.0, seed=9), "10.7.0."
        )
    ]
    evil = [
        (name, {**labels, "instance": f"{HOSTILE}:9100"}, samples)
        for name, labels, samples in node_history(1, end, span_s=1000.0, seed=11)
    ]
    return fresh + stale + frozen + over + evil


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


def op(entry: dict[str, Any], wire_type: str, operator: str = "AVG") -> float:
    return next(
        m["value"] for m in entry["metrics"] if m["type"] == wire_type and m["operator"] == operator
    )


async def page_of(client: TestClient, **params: str) -> Page:
    resp = await client.get("/", params=params)
    assert resp.status == 200, await resp.text()
    return Page(await resp.text())


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


async def test_host_provider_node_is_listed_with_its_figures_and_charts(aiohttp_client) -> None:
    engine = app.build_engine(settings({"LOADWATCHER_POLL_INTERVAL_S": "2"}))
    await engine.cycle()
    await engine.cycle(engine.clock() + 1)
    client = await aiohttp_client(api.make_app(engine))
    resp = await client.get("/")
    assert resp.headers["Content-Security-Policy"].startswith("default-src 'none'")
    text = await resp.text()
    page = Page(text)
    served = await watcher_nodes(client, "15m")
    assert [r.node for r in page.rows] == list(served)
    row = page.rows[0]
    assert row.quality == served[row.node]["tags"]["quality"]
    memory = row.figures(1)
    for name in FIGURES:
        want = op(served[row.node], "Memory", name)
        assert float(memory[name]) == pytest.approx(want, abs=0.051), name
    assert int(memory["n"]) == 2  # two cycles, one sample each
    assert row.sparks == 2  # CPU and memory, drawn from the two samples held
    assert page.scripts == 0
    assert f'content="{statuspage.MIN_REFRESH_S}"' in text  # 2 s polls: refresh floor
    # The filter survives in the sort links, URL-encoded and then HTML-escaped.
    filtered = await (await client.get("/", params={"q": 'a b&c#"'})).text()
    assert "?sort=-cpu&amp;q=a%20b%26c%23%22" in filtered
    assert Page(filtered).rows == []
    await engine.close()


def test_bands_cover_the_percent_range() -> None:
    values = (0, 19.9, 20, 45, 60, 80, 90, 100)
    assert [statusrows.band(v) for v in values] == [0, 0, 1, 2, 3, 4, 5, 5]
    assert statusrows.bands(__import__("numpy").array(values)).tolist() == [0, 0, 1, 2, 3, 4, 5, 5]


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("bogus=1", "bad_parameter"),
        ("sort=bogus", "bad_sort"),
        ("sort=--cpu", "bad_sort"),
        ("sort=cpu&sort=name", "bad_parameter"),
        ("q=a&q=../../x", "bad_parameter"),
        ("window=1h", "bad_window"),
        ("page=0", "bad_parameter"),
        ("page=-1", "bad_parameter"),
        ("page=1e3", "bad_parameter"),
        ("limit=1001", "bad_parameter"),
        ("limit=%D9%A1", "bad_parameter"),  # an Arabic-Indic digit one: isdigit() but not ASCII
        ("limit=" + "9" * 40, "bad_parameter"),
        ("node=", "bad_node"),
        ("node=" + "n" * 254, "bad_node"),
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


@pytest.mark.parametrize("sort", statusrows.SORTS)
async def test_every_sort_both_ways_is_accepted(aiohttp_client, sort) -> None:
    """``?sort=-cpu`` was a 400 before the page sorted both ways."""
    engine = app.build_engine(settings({}))
    await engine.cycle()
    client = await aiohttp_client(api.make_app(engine))
    resp = await client.get("/", params={"sort": sort})
    assert resp.status == 200
    assert len(Page(await resp.text()).rows) == 1
    await engine.close()


# --------------------------------------------------------------------------- auth


@pytest.fixture
async def protected(aiohttp_client, tmp_path) -> AsyncIterator[TestClient]:
    token_file = tmp_path / "tokens"
    token_file.write_text("# readers\nsecret-token-1\n")
    engine = app.build_engine(settings({}))  # the host provider
    await engine.cycle()
    yield await aiohttp_client(api.make_app(engine, tokens=TokenFile(str(token_file))))
    await engine.close()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_with_auth_the_page_asks_the_browser_for_basic_credentials(protected, caplog) -> None:
    client = protected
    caplog.set_level(logging.DEBUG)
    denied = await client.get("/")
    assert denied.status == 401
    # A Basic challenge makes a browser show its login dialog (Bearer shows only the error).
    assert denied.headers["WWW-Authenticate"].startswith('Basic realm="loadwatcher"')
    body = await denied.json()
    assert body["error"] == "unauthorized" and "token" in body["message"]
    for user in ("", "admin", "ünïcode"):  # any user name; the password is the token
        ok = await client.get("/", headers={"Authorization": basic(user, "secret-token-1")})
        assert ok.status == 200 and ok.content_type == "text/html", user
    for wrong in (
        basic("admin", "wrong"),
        basic("secret-token-1", ""),  # the token as user name is not the password
        "Basic " + base64.b64encode(b"secret-token-1").decode(),  # no colon
        "Basic !!!not-base64",
        "Basic " + base64.b64encode(b"u:\xff\xfe").decode(),  # not UTF-8
        "Digest secret-token-1",
    ):
        resp = await client.get("/", headers={"Authorization": wrong})
        assert resp.status == 401, wrong
    # API clients keep Bearer, and get a Bearer challenge; the links the page holds open
    # with the browser's Basic credentials.
    api_denied = await client.get("/watcher")
    assert api_denied.headers["WWW-Authenticate"].startswith("Bearer")
    bearer = {"Authorization": "Bearer secret-token-1"}
    assert (await client.get("/watcher", headers=bearer)).status == 200
    assert (await client.get("/", headers=bearer)).status == 200
    browser = {"Authorization": basic("me", "secret-token-1")}
    assert (await client.get("/watcher/health", headers=browser)).status in (200, 503)
    assert (await client.get("/watcher", headers=browser)).status == 200
    assert "secret-token-1" not in caplog.text
    assert base64.b64encode(b"me:secret-token-1").decode() not in caplog.text


# --------------------------------------------------------------------------- a real fleet


@pytest.mark.backend
async def test_page_figures_are_the_api_figures_in_every_window(fleet) -> None:
    client, _ = fleet
    for window in ("5m", "10m", "15m"):
        page = await page_of(client, window=window, limit="1000")
        rows = page.by_node()
        served = await watcher_nodes(client, window)
        assert len(rows) == ALL_NODES
        for node, row in list(rows.items())[::23]:
            for resource, wire_type in ((0, "CPU"), (1, "Memory")):
                shown = row.figures(resource)
                if node not in served:
                    assert shown == {}, (node, window)
                    continue
                for name in FIGURES:
                    want = op(served[node], wire_type, name)
                    assert float(shown[name]) == pytest.approx(want, abs=0.051), (node, name)
                assert int(shown["n"]) > 0


@pytest.mark.backend
async def test_problem_nodes_come_first_and_health_agrees(fleet) -> None:
    client, _ = fleet
    page = await page_of(client)
    qualities = [r.quality for r in page.rows]
    assert len(page.rows) == statuslist.DEFAULT_LIMIT
    # Stale before frozen before ok, each in name order.
    assert qualities[:STALE_NODES] == ["stale"] * STALE_NODES
    assert qualities[STALE_NODES:PROBLEM_NODES] == ["frozen"] * FROZEN_NODES
    assert set(qualities[PROBLEM_NODES:]) == {"ok"}
    stale = [r.node for r in page.rows[:STALE_NODES]]
    assert stale == [f"10.9.0.{j}" for j in range(1, STALE_NODES + 1)]
    health = await (await client.get("/watcher/health")).json()
    assert set(health["snapshot"]["staleNodes"]) == set(stale)
    assert health["status"] == "degraded"
    assert "degraded" in page.text["health"]
    assert f"showing 1–{statuslist.DEFAULT_LIMIT} of {ALL_NODES} nodes" in page.text["showing"]
    # Stale rows' charts stop where their samples stopped; every row has its two charts.
    assert all(r.sparks == 2 for r in page.rows)
    # The rest is on the next pages, and the last page ends with the last node.
    assert "next" in page.ids
    pages = math.ceil(ALL_NODES / statuslist.DEFAULT_LIMIT)
    last = await page_of(client, page=str(pages))
    assert len(last.rows) == ALL_NODES - (pages - 1) * statuslist.DEFAULT_LIMIT
    assert "next" not in last.ids
    beyond = await page_of(client, page=str(pages + 5))  # past the end: the last page
    assert [r.node for r in beyond.rows] == [r.node for r in last.rows]


@pytest.mark.backend
async def test_dropped_samples_are_shown_as_the_self_metrics_count_them(fleet) -> None:
    client, _ = fleet
    metrics = await (await client.get("/metrics")).text()
    match = re.search(r'loadwatcher_samples_dropped_total\{reason="over_100"\} (\S+)', metrics)
    assert match is not None
    over = int(float(match.group(1)))
    assert over > 0  # the 10.7.0.x nodes' values over 100 %
    page = await page_of(client)
    assert f"over 100 {over:,}" in page.text["dropped"]
    assert page.text["dropped"].startswith(f"{over:,}")


@pytest.mark.backend
async def test_hostile_node_names_are_escaped(fleet) -> None:
    client, _ = fleet
    text = await (await client.get("/", params={"q": "evil", "limit": "1000"})).text()
    assert "<script>" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;node" in text
    page = Page(text)
    assert page.scripts == 0
    row = page.by_node()[HOSTILE]  # the name survives, as text
    # Its own view opens from its link, the name URL-encoded.
    assert parse_qs(urlsplit(row.href).query)["node"] == [HOSTILE]
    view = await client.get("/" + row.href)
    assert view.status == 200
    view_text = await view.text()
    assert "<script>" not in view_text and Page(view_text).charts == 2


@pytest.mark.backend
async def test_sort_both_ways_and_filter(fleet) -> None:
    client, _ = fleet
    served = await watcher_nodes(client, "15m")
    busiest = await page_of(client, sort="-cpu", limit="1000")
    cpu = [op(served[r.node], "CPU") for r in busiest.rows]
    assert len(cpu) == ALL_NODES and cpu == sorted(cpu, reverse=True)
    idlest = await page_of(client, sort="cpu", limit="1000")
    assert [op(served[r.node], "CPU") for r in idlest.rows] == sorted(cpu)
    by_memory = await page_of(client, sort="-memory", window="5m", limit="50")
    memory = [float(r.figures(1)["AVG"]) for r in by_memory.rows]
    assert memory == sorted(memory, reverse=True)
    # The 5-minute window holds no stale node: they sort last whichever the direction.
    for sort in ("cpu", "-cpu"):
        page = await page_of(client, sort=sort, window="5m", limit="1000")
        assert {r.quality for r in page.rows[-STALE_NODES:]} == {"stale"}, sort
    names = [r.node for r in (await page_of(client, sort="-name", limit="1000")).rows]
    assert names == [r.node for r in (await page_of(client, sort="name", limit="1000")).rows][::-1]
    ok_first = await page_of(client, sort="-quality", limit="1000")
    assert ok_first.rows[0].quality == "ok" and ok_first.rows[-1].quality == "stale"
    # The header links sort the other way on the second click.
    assert busiest.sort_links["cpu"].startswith("?sort=cpu")
    assert idlest.sort_links["-cpu"].startswith("?sort=-cpu")
    filtered = await page_of(client, q="10.9.0.")
    assert len(filtered.rows) == STALE_NODES
    assert f"of {ALL_NODES} nodes" in filtered.text["showing"]
    nothing = await page_of(client, sort="name", q="x" * 999)
    assert nothing.rows == []  # an absurd filter matches nothing


@pytest.mark.backend
async def test_a_nodes_own_view_has_its_charts_figures_and_tags(fleet) -> None:
    client, _ = fleet
    node = "10.9.0.1"  # stale
    served = (await watcher_nodes(client, "15m"))[node]
    resp = await client.get("/", params={"node": node, "sort": "-cpu"})
    assert resp.status == 200
    text = await resp.text()
    page = Page(text)
    assert page.charts == 2 and page.text["node-name"] == node
    assert '"cpu":"stale"' in page.text["tags"] or "stale" in page.text["tags"]
    assert "lastSample" in page.text["tags"]
    # The 15-minute figures of the API are in the CPU table, with one decimal.
    for name in ("Latest", "AVG", "P99", "MIN"):
        assert f"{op(served, 'CPU', name):.1f}" in page.text["chart-cpu"], name
    back = next(link for link in page.links if "sort=-cpu" in link)
    assert back == "?sort=-cpu"  # the way back keeps the list's order
    missing = await client.get("/", params={"node": "no-such-node"})
    assert missing.status == 404 and "no-node" in Page(await missing.text()).ids


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


async def screenshot(binary: str, tmp_path: Path, name: str, url: str) -> None:
    out = artifacts_dir(tmp_path) / name
    await run_chromium(
        binary,
        tmp_path / f"profile-{name}",
        f"--screenshot={out}",
        "--window-size=1440,900",
        url,
    )
    assert png_size(out) == (1440, 900)
    assert out.stat().st_size > 20_000  # a page, not a blank window


@pytest.fixture
async def served_fleet(fleet) -> AsyncIterator[tuple[str, TestClient, Engine]]:
    """The fleet's app on a real loopback port, for the browser."""
    client, engine = fleet
    runner = web.AppRunner(api.make_app(engine), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        yield f"http://127.0.0.1:{port}/", client, engine
    finally:
        await runner.cleanup()


@pytest.mark.backend
async def test_chromium_shows_1000_nodes_problems_first_with_charts(served_fleet, tmp_path) -> None:
    binary = chromium_binary()
    url, client, _ = served_fleet
    served = await watcher_nodes(client, "15m")
    page = Page(await run_chromium(binary, tmp_path / "profile-dom", "--dump-dom", url))
    assert {"health", "provider", "snapshot-age", "node-count", "dropped"} <= page.ids
    assert f"of {ALL_NODES} nodes" in page.text["showing"]
    # Problem nodes first, then the others; each row with its CPU and memory charts.
    qualities = [r.quality for r in page.rows]
    assert len(qualities) == statuslist.DEFAULT_LIMIT
    assert "ok" not in qualities[:PROBLEM_NODES] and set(qualities[PROBLEM_NODES:]) == {"ok"}
    assert all(r.sparks == 2 for r in page.rows)
    # A sort link, followed as the browser would: the busiest CPU first.
    link = page.sort_links["-cpu"]
    sorted_page = Page(
        await run_chromium(binary, tmp_path / "profile-sorted", "--dump-dom", url + link)
    )
    cpu = [op(served[r.node], "CPU") for r in sorted_page.rows]
    assert len(cpu) == statuslist.DEFAULT_LIMIT
    assert cpu == sorted(cpu, reverse=True)
    assert cpu[0] == max(op(entry, "CPU") for entry in served.values())
    await screenshot(binary, tmp_path, "status-page.png", url)
    await screenshot(binary, tmp_path, "status-page-by-cpu.png", url + link)
    await screenshot(binary, tmp_path, "status-page-node.png", url + page.rows[0].href)


@pytest.mark.backend
async def test_chromium_opens_the_page_with_the_token_as_password(fleet, tmp_path) -> None:
    binary = chromium_binary()
    _, engine = fleet
    token_file = tmp_path / "tokens"
    token_file.write_text("browser-secret\n")
    runner = web.AppRunner(api.make_app(engine, tokens=TokenFile(str(token_file))), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        # What a person types in the login dialog, given in the URL (headless has no dialog).
        signed_in = f"http://reader:browser-secret@127.0.0.1:{port}/"
        page = Page(await run_chromium(binary, tmp_path / "profile-auth", "--dump-dom", signed_in))
        assert len(page.rows) == statuslist.DEFAULT_LIMIT
        refused = await run_chromium(
            binary,
            tmp_path / "profile-refused",
            "--dump-dom",
            f"http://reader:wrong@127.0.0.1:{port}/",
        )
        assert Page(refused).rows == []  # a wrong password opens nothing
    finally:
        await runner.cleanup()
