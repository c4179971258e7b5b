"""The Kubernetes client (metrics-server) reads answers as the HTTP backends do: at most
``provider.max_answer_bytes`` of each, and a 429 or 503 keeps its ``Retry-After``.

The API server is a plain aiohttp app on loopback reached through a kubeconfig, so the
requests go through ``kubernetes_asyncio`` as in production.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.providers import registry
from loadwatcher.providers.kube.access import KubeAccess
from loadwatcher.providers.kube.client import KubeClient
from loadwatcher.providers.kube.metrics_server import MetricsServerProvider
from tests.support.service import settings

MIB = 2**20
CAP = 4 * MIB
ENDLESS = 200 * MIB
STOPPED_EARLY = 64 * MIB
NODES = "/api/v1/nodes"


def write_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\n"
        "kind: Config\n"
        "current-context: t\n"
        "clusters:\n"
        f"- {{name: t, cluster: {{server: '{server}'}}}}\n"
        "contexts:\n"
        "- {name: t, context: {cluster: t, user: u}}\n"
        "users:\n"
        "- {name: u, user: {token: t0ken}}\n"
    )
    return path


async def client_for(aiohttp_server, tmp_path: Path, handler) -> KubeClient:
    application = web.Application()
    application.router.add_get(NODES, handler)
    server = await aiohttp_server(application)
    config = write_kubeconfig(tmp_path / "kubeconfig", str(server.make_url("")).rstrip("/"))
    return KubeClient(KubeAccess(kubeconfig=str(config), max_answer_bytes=CAP))


async def test_an_endless_list_is_cut_at_the_cap(aiohttp_server, tmp_path: Path) -> None:
    sent = 0
    done = asyncio.Event()

    async def endless(request: web.Request) -> web.StreamResponse:
        nonlocal sent
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        try:
            await resp.prepare(request)
            await resp.write(b'{"items":[')
            while sent < ENDLESS:
                await resp.write(b'{"metadata":{"name":"n"}},' * (MIB // 26))
                sent += MIB
        except ConnectionError:
            pass
        finally:
            done.set()
        return resp

    client = await client_for(aiohttp_server, tmp_path, endless)
    try:
        with pytest.raises(ProviderError) as got:
            await client.list_all(NODES)
        await asyncio.wait_for(done.wait(), 30)
    finally:
        await client.close()
    assert got.value.kind is ProviderErrorKind.TOO_LARGE
    assert got.value.message == (
        f"GET {NODES} answered more than 4 MiB (provider.max_answer_bytes); refused"
    )
    assert sent < STOPPED_EARLY


async def test_a_page_over_the_cap_by_content_length_is_refused(
    aiohttp_server, tmp_path: Path
) -> None:
    async def big(request: web.Request) -> web.Response:
        return web.Response(body=b" " * (CAP + 1), content_type="application/json")

    client = await client_for(aiohttp_server, tmp_path, big)
    try:
        with pytest.raises(ProviderError) as got:
            await client.get_json(NODES, [])
    finally:
        await client.close()
    assert got.value.kind is ProviderErrorKind.TOO_LARGE
    assert f"more than 4 MiB (Content-Length {CAP + 1})" in got.value.message


async def test_a_list_under_the_cap_is_read(aiohttp_server, tmp_path: Path) -> None:
    async def nodes(request: web.Request) -> web.Response:
        return web.json_response({"items": [{"metadata": {"name": "a"}}], "metadata": {}})

    client = await client_for(aiohttp_server, tmp_path, nodes)
    try:
        items = await client.list_all(NODES)
    finally:
        await client.close()
    assert items == [{"metadata": {"name": "a"}}]


@pytest.mark.parametrize(
    ("status", "header", "kind", "wait"),
    [
        (429, "7", ProviderErrorKind.RATE_LIMITED, 7.0),
        (429, None, ProviderErrorKind.RATE_LIMITED, None),
        (429, "later", ProviderErrorKind.RATE_LIMITED, None),
        (503, "12", ProviderErrorKind.SERVER, 12.0),
        (503, "Sun, 06 Nov 1994 08:49:37 GMT", ProviderErrorKind.SERVER, 0.0),
        (500, "12", ProviderErrorKind.SERVER, None),
    ],
)
async def test_retry_after_is_kept(
    aiohttp_server,
    tmp_path: Path,
    status: int,
    header: str | None,
    kind: ProviderErrorKind,
    wait: float | None,
) -> None:
    async def busy(request: web.Request) -> web.Response:
        headers = {"Retry-After": header} if header is not None else {}
        body = {"kind": "Status", "message": "too many requests, please try again later"}
        return web.json_response(body, status=status, headers=headers)

    client = await client_for(aiohttp_server, tmp_path, busy)
    try:
        with pytest.raises(ProviderError) as got:
            await client.list_all(NODES)
    finally:
        await client.close()
    assert got.value.kind is kind
    assert got.value.retry_after_s == wait
    assert "too many requests" in got.value.message
    assert ("Retry-After" in got.value.message) is (wait is not None)
    if status == 429:
        assert got.value.message.startswith(f"GET {NODES}: 429 Too Many Requests")


def test_the_metrics_server_provider_gets_the_cap_from_the_provider_section() -> None:
    env = {"METRICS_PROVIDER_NAME": "metrics-server", "LOADWATCHER_PROVIDER_MAX_ANSWER_BYTES": "5"}
    built = registry.build_provider(settings(env))
    assert isinstance(built, MetricsServerProvider)
    assert built.client.settings.max_answer_bytes == 5
