"""``POST /watcher/{node}/forget`` and ``loadwatcher forget`` against the real push service,
in-process (``app.build_engine``, ``app.build_receiver``, ``api.make_app``): one test push
into a three-node service makes health 503 once it is stale; forgetting it makes health
ok at once. The engine's and the receiver's clocks are set by hand.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, make_mocked_request

from loadwatcher import app, cli
from loadwatcher.engine import Engine
from loadwatcher.http import api, openapi
from loadwatcher.http.security import TokenFile
from tests.support.service import settings

Client = TestClient[web.Request, web.Application]
T = 1_700_000_000.0
TOKEN = "tok-forget-2b7c"


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def lines(*hosts: str, at: float) -> bytes:
    """What a `curl --data-binary` of Telegraf's cpu and mem lines sends, times in s."""
    return "".join(
        f"cpu,cpu=cpu-total,host={h} usage_idle=80 {int(at)}\n"
        f"mem,host={h} used_percent=40,total=8i {int(at)}\n"
        for h in hosts
    ).encode()


class Push:
    def __init__(self, client: Client, engine: Engine, clock: Clock, auth: dict[str, str]):
        self.client, self.engine, self.clock, self.auth = client, engine, clock, auth

    async def push(self, *hosts: str) -> None:
        resp = await self.client.post(
            "/write", data=lines(*hosts, at=self.clock.t), params={"precision": "s"}
        )
        assert resp.status == 204, await resp.text()

    async def cycle(self) -> None:
        await self.engine.cycle(self.clock.t)

    async def health(self) -> tuple[int, dict[str, Any]]:
        resp = await self.client.get("/watcher/health", headers=self.auth)
        return resp.status, await resp.json()

    async def nodes(self) -> set[str]:
        resp = await self.client.get("/watcher", headers=self.auth)
        assert resp.status == 200
        return set((await resp.json())["data"]["NodeMetricsMap"] or {})

    async def forget(self, node: str, **headers: str) -> tuple[int, dict[str, Any]]:
        resp = await self.client.post(f"/watcher/{node}/forget", headers=headers)
        return resp.status, orjson.loads(await resp.read())


async def start(aiohttp_client: Any, tmp_path: Path, auth: bool = False) -> Push:
    config = settings(
        {"METRICS_PROVIDER_NAME": "push", "LOADWATCHER_JOURNAL_PATH": str(tmp_path / "lw.db")}
    )
    engine = app.build_engine(config)
    clock = Clock(T)
    engine.clock = clock
    receiver = app.build_receiver(config, engine)
    assert receiver is not None
    receiver.clock = clock
    tokens = None
    if auth:
        (tmp_path / "tokens").write_text(f"{TOKEN}\n")
        tokens = TokenFile(str(tmp_path / "tokens"))
    await engine.recover()
    client = await aiohttp_client(api.make_app(engine, tokens=tokens, receiver=receiver))
    return Push(client, engine, clock, {"Authorization": f"Bearer {TOKEN}"} if auth else {})


async def with_a_stale_test_push(p: Push) -> None:
    """Nodes a and b push every 15 s; `test` pushed once; 5 minutes and more later."""
    await p.push("a", "b", "test")
    await p.cycle()
    for _ in range(22):
        p.clock.t += 15
        await p.push("a", "b")
        await p.cycle()


async def test_forgetting_a_test_push_makes_health_ok_at_once(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    p = await start(aiohttp_client, tmp_path)
    await with_a_stale_test_push(p)
    status, body = await p.health()
    assert status == 503, body
    assert body["snapshot"]["staleNodes"] == ["test"]
    assert body["badNodes"]["of"] == 3
    status, doc = await p.forget("test")  # from loopback, auth off: allowed
    assert (status, doc) == (200, {"forgotten": "test"})
    status, body = await p.health()
    assert status == 200 and body["status"] == "ok", body
    assert body["badNodes"]["of"] == 2
    assert body["snapshot"]["goneNodes"] == []
    assert await p.nodes() == {"a", "b"}
    # Later cycles agree; a second forget is a 404.
    p.clock.t += 15
    await p.push("a", "b")
    await p.cycle()
    assert (await p.health())[0] == 200
    status, doc = await p.forget("test")
    assert status == 404 and doc["error"] == "node_not_found"
    # It pushes again: a new node, served with its new sample only.
    await p.push("a", "b", "test")
    p.clock.t += 1
    await p.cycle()
    assert await p.nodes() == {"a", "b", "test"}
    await p.engine.close()


async def test_forget_needs_a_readers_token_when_auth_is_on(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    p = await start(aiohttp_client, tmp_path, auth=True)
    await with_a_stale_test_push(p)
    status, doc = await p.forget("test")
    assert status == 401 and doc["error"] == "unauthorized"
    status, doc = await p.forget("test", Authorization="Bearer not-it")
    assert status == 401
    assert "test" in await p.nodes()  # refused: nothing changed
    status, doc = await p.forget("test", **p.auth)
    assert (status, doc) == (200, {"forgotten": "test"})
    assert (await p.health())[0] == 200
    await p.engine.close()


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/watcher/nope/forget", 404, "node_not_found"),
        ("/watcher/-bad-/forget", 400, "bad_host"),
        ("/watcher/a/forget?x=1", 400, "bad_parameter"),
    ],
)
async def test_forget_errors_are_json(
    aiohttp_client: Any, tmp_path: Path, path: str, status: int, code: str
) -> None:
    p = await start(aiohttp_client, tmp_path)
    await p.push("a")
    await p.cycle()
    resp = await p.client.post(path)
    assert resp.status == status
    doc = orjson.loads(await resp.read())
    assert doc["error"] == code and doc["message"]
    assert (await p.client.get("/watcher/a/forget")).status == 405  # POST only
    await p.engine.close()


async def test_without_auth_forget_is_refused_from_the_network(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    p = await start(aiohttp_client, tmp_path)
    await p.push("a")
    await p.cycle()
    transport = mock.Mock()
    transport.get_extra_info.return_value = ("10.1.2.3", 40000)
    request = make_mocked_request(
        "POST",
        "/watcher/a/forget",
        match_info={"hostname": "a"},
        app=p.client.app,
        transport=transport,
    )
    resp = await api.watcher_forget(request)
    assert resp.status == 403
    assert orjson.loads(resp.body)["error"] == "forbidden"  # type: ignore[arg-type]
    assert await p.nodes() == {"a"}
    await p.engine.close()


def test_forget_is_in_openapi() -> None:
    op = openapi.spec()["paths"]["/watcher/{hostname}/forget"]["post"]
    assert {"200", "401", "403", "404"} <= set(op["responses"])


async def test_the_cli_forgets_with_a_token_file(
    aiohttp_client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = await start(aiohttp_client, tmp_path, auth=True)
    await with_a_stale_test_push(p)
    url = str(p.client.make_url("/"))
    argv = ["forget", "test", "--watcher", url]
    assert await asyncio.to_thread(cli.main, argv) == 1  # no token
    err = capsys.readouterr().err
    assert "requires a token" in err and TOKEN not in err
    argv += ["--token-file", str(tmp_path / "tokens")]
    assert await asyncio.to_thread(cli.main, argv) == 0
    assert capsys.readouterr().out == "forgot test\n"
    assert (await p.health())[0] == 200
    assert await asyncio.to_thread(cli.main, argv) == 1  # gone now
    err = capsys.readouterr().err
    assert "knows no node 'test'" in err and TOKEN not in err
    assert await asyncio.to_thread(cli.main, ["forget", "x", "--watcher", "nope.json"]) == 2
    await p.engine.close()
