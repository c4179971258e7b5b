"""The HTTP API (aiohttp): serves the bytes the last cycle rendered.

Routes (docs/architecture.md, Wire formats): ``/watcher`` (``?host=``, ``?window=``, ``?format=``),
``/watcher/{hostname}``, ``/watcher/health``, ``POST /watcher/{hostname}/forget``,
``/healthz``, ``/readyz``, ``/metrics``, ``/openapi.json`` (and ``/`` from statuspage);
while receiving, the push endpoints of ``push``. Every error is JSON
``{"error": code, "message": text}``, never a traceback.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import orjson
from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import Histogram

from loadwatcher.config.settings import QuerySettings
from loadwatcher.engine import Engine
from loadwatcher.engine.published import Body
from loadwatcher.engine.selfmetrics import CONTENT_TYPE
from loadwatcher.http import negotiation, openapi_promql, params, prepared, security
from loadwatcher.http.appkeys import (
    AUTH_KEY,
    ENCODINGS_KEY,
    ENGINE_KEY,
    PROMQL_KEY,
    RECEIVING_KEY,
)
from loadwatcher.http.edge import CLIENT_CLOSED
from loadwatcher.http.params import NODE_NAME_PATTERN, BadRequest
from loadwatcher.http.security import TokenFile
from loadwatcher.model import WINDOWS
from loadwatcher.push import protocol as push_protocol
from loadwatcher.wire.formats import Format

if TYPE_CHECKING:
    from loadwatcher.http.push import Receiver

log = logging.getLogger("loadwatcher.api")

_WINDOW_NAMES = tuple(w.name for w in WINDOWS)
_ALLOWED_PARAMS = frozenset({"host", "window", "format"})
_NODE_NAME = re.compile(NODE_NAME_PATTERN)


def error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps({"error": code, "message": message}),
        content_type="application/json",
        headers=headers,
    )


def _params(request: web.Request) -> tuple[str | None, Format, str | None]:
    query = params.checked(request.query, _ALLOWED_PARAMS)
    window = query.get("window")
    if window is not None and window not in _WINDOW_NAMES:
        raise BadRequest("bad_window", f"window must be one of {', '.join(_WINDOW_NAMES)}")
    fmt_text = query.get("format", Format.DEFAULT.value)
    try:
        fmt = Format(fmt_text)
    except ValueError:
        raise BadRequest("bad_format", "format must be 'default' or 'kep'") from None
    host = query.get("host")
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


def _send(request: web.Request, body: Body) -> web.StreamResponse:
    """The body in the encoding the client accepts, 304 when it has it already.

    HTTP/1.1 keep-alive requests (all but a few) get the prepared bytes of the body
    (``prepared``); others, and all while aiohttp is not shaped as ``prepared`` relies on,
    aiohttp's ordinary response with the same headers.
    """
    headers = request.headers
    gz = negotiation.accepts_gzip(headers.get("Accept-Encoding"))
    encodings = request.app[ENCODINGS_KEY](body)
    encoded = encodings.gzip if gz else encodings.identity
    status = 304 if encoded.matches(headers.get("If-None-Match")) else 200
    if prepared.can_prepare(request):
        with_body = status == 200 and request.method != "HEAD"
        return encoded.response(status, with_body)
    fields = {"ETag": encoded.etag, "Vary": "Accept-Encoding", "Cache-Control": "no-cache"}
    if status == 304:
        return web.Response(status=304, headers=fields)
    if gz:
        fields["Content-Encoding"] = "gzip"
    return web.Response(body=encoded.payload, headers=fields, content_type=prepared.CONTENT_TYPE)


async def watcher(request: web.Request) -> web.StreamResponse:
    engine = request.app[ENGINE_KEY]
    if not request.query_string:  # the request every scheduler sends
        return await _serve(request, engine, None, Format.DEFAULT, None)
    window, fmt, host = _params(request)
    return await _serve(request, engine, window, fmt, host)


async def watcher_host(request: web.Request) -> web.StreamResponse:
    engine = request.app[ENGINE_KEY]
    window, fmt, host = _params(request)
    if host is not None:
        raise BadRequest("bad_parameter", "give the node either in the path or as ?host=")
    name = request.match_info["hostname"]
    _check_node_name(name)
    return await _serve(request, engine, window, fmt, name)


async def _serve(
    request: web.Request, engine: Engine, window: str | None, fmt: Format, host: str | None
) -> web.StreamResponse:
    pub = engine.current
    if pub is None:
        return error(503, "no_snapshot", "no snapshot yet: the first poll has not completed")
    hit, body = pub.cached(pub.key(window, fmt, host))
    if not hit:
        body = await pub.body(window, fmt, host)
    if body is None:
        return error(404, "node_not_found", f"no metrics for node {host!r}")
    if not body.inflated and not negotiation.accepts_gzip(request.headers.get("Accept-Encoding")):
        await asyncio.to_thread(body.inflate)  # 11 MB at 5,000 nodes: off the event loop
    return _send(request, body)


async def watcher_health(request: web.Request) -> web.StreamResponse:
    verdict = request.app[ENGINE_KEY].health()
    status, body = 200 if verdict.healthy else 503, orjson.dumps(verdict.body)
    if prepared.can_prepare(request):
        return prepared.json_response(status, body, with_body=request.method != "HEAD")
    return web.Response(status=status, body=body, content_type="application/json")


async def watcher_forget(request: web.Request) -> web.Response:
    """``POST /watcher/{hostname}/forget``: the node is gone on purpose (``Engine.forget``).

    It changes state, so it is never open to the network: with ``server.auth_token_file``
    the middleware asks for a reader's token; without, only a client on the loopback
    interface (``kubectl port-forward``, a shell in the pod) may forget.
    """
    params.checked(request.query, ())
    name = request.match_info["hostname"]
    _check_node_name(name)
    if not request.app[AUTH_KEY] and not _loopback(request.remote):
        return error(
            403,
            "forbidden",
            "forgetting a node needs server.auth_token_file (then a reader's token), or "
            "a request from the loopback interface (kubectl port-forward)",
        )
    outcome = await request.app[ENGINE_KEY].forget(name)
    if outcome is None:
        return error(
            503,
            "not_ready",
            "the first poll has not completed (the snapshot is the backend's aggregates): "
            "try again in a poll interval",
        )
    if not outcome:
        return error(404, "node_not_found", f"no node {name!r}: neither served nor gone")
    return web.Response(body=orjson.dumps({"forgotten": name}), content_type="application/json")


def _loopback(remote: str | None) -> bool:
    if not remote:
        return False
    try:
        return ipaddress.ip_address(remote.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


async def healthz(request: web.Request) -> web.Response:
    return web.Response(body=b'{"status":"ok"}', content_type="application/json")


async def readyz(request: web.Request) -> web.Response:
    if request.app[ENGINE_KEY].current is None:
        return error(503, "not_ready", "no snapshot yet")
    return web.Response(body=b'{"status":"ready"}', content_type="application/json")


async def status_page(request: web.Request) -> web.Response:
    # Imported at the first request (as openapi): few clients ask for the page, and every
    # import at start delays a restarted service's first answer.
    from loadwatcher.http import statuspage

    return await statuspage.status_page(request)


async def openapi_json(request: web.Request) -> web.Response:
    from loadwatcher.http import openapi  # at the first request, as statuspage

    document = openapi.spec(push=request.app[RECEIVING_KEY])
    return web.Response(body=orjson.dumps(document), content_type="application/json")


def _prometheus(name: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handler(request: web.Request) -> web.StreamResponse:
        # Imported at the first query (as openapi): the parser and evaluator are for the
        # few deployments that read the service as a Prometheus.
        from loadwatcher.http import promapi

        response: web.StreamResponse = await getattr(promapi, name)(request)
        return response

    return handler


async def metrics(request: web.Request) -> web.Response:
    body = request.app[ENGINE_KEY].metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _failure(request: web.Request, exc: Exception) -> web.Response:
    """The JSON error for what a handler raised; unexpected ones are logged, not leaked."""
    if isinstance(exc, BadRequest):
        return error(400, exc.code, exc.message)
    if isinstance(exc, web.HTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status, "http_error")
        # Keep the headers HTTP requires with the status (Allow on 405).
        kept = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        return error(exc.status, code, exc.reason, kept)
    if isinstance(exc, ConnectionError):  # the client left while its body was read
        log.debug("client of %s left mid-request: %s", request.path, exc)
        return error(CLIENT_CLOSED, "client_closed", "the client closed the connection")
    log.exception("unhandled error serving %s", request.path, exc_info=exc)
    return error(500, "internal", "internal error; see the service log")


def timing_auth_errors_middleware(
    engine: Engine,
    tokens: TokenFile | None,
    protect_metrics: bool,
    writer_paths: frozenset[str] = frozenset(),
) -> Middleware:
    """The one middleware: request timing, the token check and JSON errors.

    One layer instead of three: each aiohttp middleware is a coroutine call per request,
    which counts on a route that only writes prepared bytes. ``writer_paths`` are the push
    endpoints, which check writers' tokens of their own.
    """
    histogram = engine.metrics.http_duration
    # Histogram children by (route template, status): labels() validates and locks.
    children: dict[tuple[str, int], Histogram] = {}

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        response: web.StreamResponse
        if (
            tokens is not None
            and security.needs_token(request.path, protect_metrics)
            and request.path not in writer_paths  # writers have tokens of their own
            # Bearer, or Basic with the token as password: what a browser sends once the
            # page asked, for the page and for the routes it links to.
            and not tokens.accepts_reader(request.headers.get("Authorization"))
        ):
            response = security.unauthorized(page=request.path in security.PAGE_PATHS)
        else:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                if exc.status < 400:
                    raise
                response = _failure(request, exc)
            except Exception as exc:
                response = _failure(request, exc)
        # Request duration by route template (never the raw path: bounded label values).
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        key = (route, response.status)
        child = children.get(key)
        if child is None:
            child = children[key] = histogram.labels(route, str(response.status))
        child.observe(time.perf_counter() - started)
        return response

    return middleware


def make_app(
    engine: Engine,
    *,
    tokens: TokenFile | None = None,
    protect_metrics: bool = False,
    receiver: Receiver | None = None,
    query: QuerySettings | None = None,
) -> web.Application:
    # Every push protocol's routes, received or not: a writer's request never meets the
    # readers' token check (without a receiver it is a 404).
    writers = push_protocol.writer_paths()
    middleware = timing_auth_errors_middleware(engine, tokens, protect_metrics, writers)
    app = web.Application(middlewares=[middleware], client_max_size=64 * 1024)
    app[ENGINE_KEY] = engine
    app[RECEIVING_KEY] = receiver is not None
    app[AUTH_KEY] = tokens is not None
    app[ENCODINGS_KEY] = prepared.EncodingsCache()
    prepared.check_aiohttp()  # at start: a warning now, not at the first request
    app.router.add_get("/watcher", watcher)
    app.router.add_get("/watcher/health", watcher_health)
    app.router.add_get("/watcher/{hostname}", watcher_host)
    app.router.add_post("/watcher/{hostname}/forget", watcher_forget)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/", status_page)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.json", openapi_json)
    # The query API's caps (its state is made at its first request: http/promapi.py).
    app[PROMQL_KEY] = {"settings": query}
    for route in openapi_promql.ROUTES:
        app.router.add_get(route.path, _prometheus(route.handler))
        if route.post:
            app.router.add_post(route.path, _prometheus(route.handler))
    if receiver is not None:
        receiver.add_routes(app)
    return app
