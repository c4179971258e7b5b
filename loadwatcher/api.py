"""The HTTP API (aiohttp): serves the bytes the last cycle rendered.

Routes (DESIGN §7): ``/watcher`` (``?host=``, ``?window=``, ``?format=``),
``/watcher/{hostname}``, ``/watcher/health``, ``/healthz``, ``/readyz``, ``/metrics``,
``/openapi.json`` (and ``/`` from statuspage). Every error is JSON
``{"error": code, "message": text}``, never a traceback.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from loadwatcher import openapi
from loadwatcher.engine import Engine
from loadwatcher.model import WINDOWS
from loadwatcher.published import Body
from loadwatcher.render import Format
from loadwatcher.security import TokenFile, auth_middleware
from loadwatcher.selfmetrics import CONTENT_TYPE

log = logging.getLogger("loadwatcher.api")

ENGINE_KEY = web.AppKey("engine", Engine)
_WINDOW_NAMES = tuple(w.name for w in WINDOWS)
_ALLOWED_PARAMS = frozenset({"host", "window", "format"})
_NODE_NAME = re.compile(openapi.NODE_NAME_PATTERN)


def error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps({"error": code, "message": message}),
        content_type="application/json",
        headers=headers,
    )


class BadRequest(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _params(request: web.Request) -> tuple[str | None, Format, str | None]:
    unknown = sorted(set(request.query) - _ALLOWED_PARAMS)
    if unknown:
        raise BadRequest("bad_parameter", f"unknown query parameter(s): {', '.join(unknown)}")
    window = request.query.get("window")
    if window is not None and window not in _WINDOW_NAMES:
        raise BadRequest("bad_window", f"window must be one of {', '.join(_WINDOW_NAMES)}")
    fmt_text = request.query.get("format", Format.DEFAULT.value)
    try:
        fmt = Format(fmt_text)
    except ValueError:
        raise BadRequest("bad_format", "format must be 'default' or 'kep'") from None
    host = request.query.get("host")
    if host is not None:
        _check_node_name(host)
    return window, fmt, host


def _check_node_name(name: str) -> None:
    """Kubernetes node names (DNS subdomains), also IPs and IPv6 as Prometheus labels give them."""
    if not _NODE_NAME.match(name):
        raise BadRequest(
            "bad_host",
            "host must be a node name: 1-253 letters, digits, '.', '-', ':' or '_', "
            "starting and ending with a letter or digit",
        )


def _send(request: web.Request, body: Body) -> web.Response:
    gz = "gzip" in request.headers.get("Accept-Encoding", "")
    etag = body.etag[:-1] + '-gzip"' if gz else body.etag
    headers = {"ETag": etag, "Vary": "Accept-Encoding", "Cache-Control": "no-cache"}
    inm = request.headers.get("If-None-Match")
    if inm is not None and (inm.strip() == "*" or etag in {t.strip() for t in inm.split(",")}):
        return web.Response(status=304, headers=headers)
    if gz:
        headers["Content-Encoding"] = "gzip"
    return web.Response(
        body=body.gz if gz else body.raw, headers=headers, content_type="application/json"
    )


async def watcher(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    window, fmt, host = _params(request)
    return await _serve(request, engine, window, fmt, host)


async def watcher_host(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    window, fmt, host = _params(request)
    if host is not None:
        raise BadRequest("bad_parameter", "give the node either in the path or as ?host=")
    name = request.match_info["hostname"]
    _check_node_name(name)
    return await _serve(request, engine, window, fmt, name)


async def _serve(
    request: web.Request, engine: Engine, window: str | None, fmt: Format, host: str | None
) -> web.Response:
    pub = engine.current
    if pub is None:
        return error(503, "no_snapshot", "no snapshot yet: the first poll has not completed")
    body = await pub.body(window, fmt, host)
    if body is None:
        return error(404, "node_not_found", f"no metrics for node {host!r}")
    return _send(request, body)


async def watcher_health(request: web.Request) -> web.Response:
    verdict = request.app[ENGINE_KEY].health()
    return web.Response(
        status=200 if verdict.healthy else 503,
        body=orjson.dumps(verdict.body),
        content_type="application/json",
    )


async def healthz(request: web.Request) -> web.Response:
    return web.Response(body=b'{"status":"ok"}', content_type="application/json")


async def readyz(request: web.Request) -> web.Response:
    if request.app[ENGINE_KEY].current is None:
        return error(503, "not_ready", "no snapshot yet")
    return web.Response(body=b'{"status":"ready"}', content_type="application/json")


async def openapi_json(request: web.Request) -> web.Response:
    return web.Response(body=orjson.dumps(openapi.spec()), content_type="application/json")


async def metrics(request: web.Request) -> web.Response:
    body = request.app[ENGINE_KEY].metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def timing(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Request duration by route template (never the raw path: bounded label values)."""
    started = time.perf_counter()
    response = await handler(request)
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    request.app[ENGINE_KEY].metrics.http_duration.labels(route, str(response.status)).observe(
        time.perf_counter() - started
    )
    return response


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every failure into a JSON error; log unexpected ones without leaking them."""
    try:
        return await handler(request)
    except BadRequest as exc:
        return error(400, exc.code, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status, "http_error")
        # Keep the headers HTTP requires with the status (Allow on 405).
        kept = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        return error(exc.status, code, exc.reason, kept)
    except Exception:
        log.exception("unhandled error serving %s", request.path)
        return error(500, "internal", "internal error; see the service log")


def make_app(
    engine: Engine, *, tokens: TokenFile | None = None, protect_metrics: bool = False
) -> web.Application:
    from loadwatcher import statuspage  # imported here: statuspage imports this module

    middlewares: list[Any] = [timing, json_errors]
    if tokens is not None:
        middlewares.insert(1, auth_middleware(tokens, protect_metrics))
    app = web.Application(middlewares=middlewares, client_max_size=64 * 1024)
    app[ENGINE_KEY] = engine
    app.router.add_get("/watcher", watcher)
    app.router.add_get("/watcher/health", watcher_health)
    app.router.add_get("/watcher/{hostname}", watcher_host)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/", statuspage.status_page)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.json", openapi_json)
    return app
