"""The listening socket's guard: a header deadline, a cap on open connections, JSON errors.

aiohttp holds a connection open as long as its client likes before the first request
(its keep-alive timer, an hour by default), serves any number of connections at once, and
answers what its HTTP parser rejects with plain text that echoes the raw request line.
``GuardedSite`` listens with a protocol factory that wraps each connection's aiohttp
``RequestHandler``:

- a connection whose request headers are not complete ``header_timeout_s`` after it opened
  (after its TLS handshake, itself bounded by the same time) is closed;
- at ``max_connections`` open connections (fewer where the descriptor limit cannot hold
  them: ``descriptors.connection_room``), a new one takes the place of the idle connection
  (one waiting for a request: never sent one, or kept alive after its last answer) that has
  been quiet longest, which is closed, as nginx reuses idle keep-alive connections when it
  runs out: holding connections open, silent or after one request, cannot lock the
  scheduler or kubelet's probes out. When every open connection is in the middle of a
  request, the new one is closed as it arrives. Either is one log line per burst;
- the parser's errors are the API's JSON error (``JsonErrorHandler``), echoing nothing.

Later requests on a kept-alive connection are bounded by aiohttp's keep-alive timer
(``keepalive_timeout_s``): it closes a connection that has not sent a complete request
that long after its last response.

The guard drives aiohttp's ``RequestHandler`` as a protocol of its own, beyond aiohttp's
documented API; ``aiohttp_mismatch`` checks that shape when the site starts, and a
mismatch stops the start with a ``StartError`` naming it: without the guard, connections
would be bounded by nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import re
import ssl
from dataclasses import dataclass

import aiohttp
import orjson
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_exceptions import BadHttpMethod, HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler

from loadwatcher.errors import StartError
from loadwatcher.http import descriptors

log = logging.getLogger("loadwatcher.edge")
# A request whose client left before its answer: nginx's status, seen in the metrics only.
CLIENT_CLOSED = 499
# The end of a header block: an empty line, with or without its carriage return.
_HEADERS_END = re.compile(rb"\n\r?\n")


@dataclass(frozen=True)
class EdgeLimits:
    header_timeout_s: float
    keepalive_timeout_s: float
    max_connections: int


def error_body(status: int, exc: BaseException | None) -> tuple[str, str]:
    """The (code, message) of an error aiohttp's server answers by itself; never the input."""
    if status == 400:
        if isinstance(exc, BadHttpMethod):
            return "bad_request", "malformed request: invalid method"
        if isinstance(exc, LineTooLong):
            return "bad_request", "malformed request: request line or header too long"
        return "bad_request", "malformed HTTP request"
    if status == 500:
        return "internal", "internal error; see the service log"
    if status == 504:
        return "timeout", "the request took too long"
    return "http_error", "the request could not be served"


class JsonErrorHandler(RequestHandler):
    """aiohttp's connection handler, answering its own errors with the API's JSON."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if isinstance(exc, HttpProcessingError) or status == 400:
            # The client's fault (often a scanner or TLS on the plain port): not an error of
            # ours, and the text would carry its bytes into the log.
            self.logger.debug("malformed request from %s: %s", request.remote, type(exc))
        else:
            self.log_exception("error handling request from %s", request.remote, exc_info=exc)
        if request.writer.output_size > 0:  # as aiohttp: too late for another response
            raise ConnectionError("response already started; cannot send the error")
        code, text = error_body(status, exc)
        response = web.Response(
            status=status,
            body=orjson.dumps({"error": code, "message": text}),
            content_type="application/json",
        )
        response.force_close()
        return response


class HeadersWatch:
    """Whether the bytes read so far hold the end of the first request's header block."""

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = b""  # the last bytes read, so an empty line split across reads counts

    def complete(self, data: bytes) -> bool:
        seen = self._tail + data
        if _HEADERS_END.search(seen):
            return True
        self._tail = seen[-2:]
        return False


# What the guard relies on in aiohttp beyond its documented API: ``RequestHandler`` built
# with these keywords and driven as an ``asyncio.Protocol`` through these methods, its
# ``handle_error`` overridden with this signature (reading the writer's ``output_size``),
# its ``_waiter`` pending while it waits for a request (aiohttp's own idle test), and a
# ``BaseSite`` whose ``stop`` closes the server the site stores in ``_server``.
_HANDLER_KEYWORDS = ("manager", "loop", "keepalive_timeout", "access_log")
_PROTOCOL_METHODS = (
    "connection_made",
    "data_received",
    "eof_received",
    "pause_writing",
    "resume_writing",
    "connection_lost",
    "log_exception",
)
_HANDLE_ERROR = ("self", "request", "status", "exc", "message")


def aiohttp_mismatch() -> str | None:
    """What the guard relies on that the installed aiohttp lacks (None: nothing)."""
    found = inspect.signature(RequestHandler.__init__).parameters
    missing = [name for name in _HANDLER_KEYWORDS if name not in found]
    if missing:
        return f"RequestHandler() takes no {', '.join(missing)}"
    for name in _PROTOCOL_METHODS:
        # aiohttp's own: asyncio.Protocol's defaults would swallow what the guard forwards.
        owner = next((k for k in RequestHandler.__mro__ if name in vars(k)), None)
        method = vars(owner).get(name) if owner is not None else None
        if owner is None or not owner.__module__.startswith("aiohttp."):
            return f"RequestHandler has no {name} of its own"
        if not inspect.isfunction(method) or inspect.iscoroutinefunction(method):
            return f"RequestHandler.{name} is not a plain method"
    params = tuple(inspect.signature(RequestHandler.handle_error).parameters)
    if params != _HANDLE_ERROR:
        return f"RequestHandler.handle_error takes ({', '.join(params)})"
    if "_waiter" not in getattr(RequestHandler, "__slots__", ()):
        return "RequestHandler keeps no _waiter"
    if not isinstance(inspect.getattr_static(AbstractStreamWriter, "output_size", None), int):
        return "the stream writer has no output_size"
    if "_server" not in getattr(web.BaseSite, "__slots__", ()):
        return "BaseSite keeps no _server"
    if not isinstance(inspect.getattr_static(web.BaseRunner, "server", None), property):
        return "BaseRunner.server is not a property"
    return None


class Guard:
    """The protocol factory: one ``GuardedConnection`` per accepted connection."""

    def __init__(self, server: web.Server, limits: EdgeLimits) -> None:
        self.server = server
        self.limits = limits
        self.open = 0
        self.refusals = descriptors.Refusals()
        self.evictions = descriptors.Refusals()
        # The open connections, the one that received bytes longest ago first.
        self.by_activity: dict[GuardedConnection, None] = {}

    def __call__(self) -> GuardedConnection:
        return GuardedConnection(self)

    def handler(self) -> RequestHandler:
        """The connection's aiohttp handler, built here rather than by ``self.server``: the
        runner's handler arguments are not used, these are."""
        return JsonErrorHandler(
            self.server,
            loop=asyncio.get_running_loop(),
            keepalive_timeout=self.limits.keepalive_timeout_s,
            # No access log, as AppRunner(access_log=None) passes it (typed Logger only).
            access_log=None,  # type: ignore[arg-type]
        )

    def admit(self) -> bool:
        """Whether a new connection may open: under the cap, or in the place of the idle
        connection quiet longest (closed here)."""
        if self.open < self.limits.max_connections:
            return True
        quiet = next((c for c in self.by_activity if c.idle()), None)
        if quiet is None:
            if self.refusals.refused():
                log.warning(
                    "refusing new connections: %d open, each in the middle of a request "
                    "(server.max_connections)%s",
                    self.open,
                    self.refusals.take_unlogged(),
                )
            return False
        quiet.close()
        if self.evictions.refused():
            log.warning(
                "%d connections open (server.max_connections): closing idle ones, quiet "
                "longest first, to admit new ones%s",
                self.open + 1,
                self.evictions.take_unlogged(),
            )
        return True


class GuardedConnection(asyncio.Protocol):
    """One connection: admitted under the cap, closed if its headers do not come in time."""

    def __init__(self, guard: Guard) -> None:
        self._guard = guard
        self._inner: RequestHandler | None = None
        self._transport: asyncio.Transport | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._headers = HeadersWatch()
        self._counted = False  # holds one of the guard's open places

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        guard = self._guard
        if not guard.admit():
            transport.abort()  # frees the descriptor now; connection_lost follows
            return
        guard.open += 1
        self._counted = True
        guard.by_activity[self] = None
        self._transport = transport
        self._deadline = asyncio.get_running_loop().call_later(
            guard.limits.header_timeout_s, self.close
        )
        self._inner = guard.handler()
        self._inner.connection_made(transport)

    def close(self) -> None:
        """Close the connection now (its headers are late, or its place is wanted); its
        place is free at once, before asyncio reports it lost."""
        self._stop_waiting()
        self._release()
        if self._transport is not None:
            self._transport.abort()

    def _stop_waiting(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _release(self) -> None:
        if self._counted:
            self._counted = False
            self._guard.open -= 1
            self._guard.by_activity.pop(self, None)

    def idle(self) -> bool:
        """Whether the connection waits for a request: its first one's headers have not all
        come (known here, even before aiohttp's handler has started), or aiohttp's handler
        waits for the next one (kept alive)."""
        if self._deadline is not None:
            return True
        waiter = getattr(self._inner, "_waiter", None)
        return waiter is not None and not waiter.done()

    def data_received(self, data: bytes) -> None:
        if self._counted:  # the most recently active now
            activity = self._guard.by_activity
            del activity[self]
            activity[self] = None
        if self._deadline is not None and self._headers.complete(data):
            self._stop_waiting()
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> None:
        if self._inner is not None:
            self._inner.eof_received()

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        self._release()
        if self._inner is not None:
            inner, self._inner = self._inner, None
            self._transport = None
            inner.connection_lost(exc)


class GuardedSite(web.BaseSite):
    """A TCP site (as ``web.TCPSite``) whose connections pass through a ``Guard``."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        limits: EdgeLimits,
        *,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        server = runner.server
        assert server is not None  # BaseSite checked it
        self.guard = Guard(server, limits)
        self._tls = ssl_context
        self._listen_backlog = backlog
        self._host = host
        self._port = port
        self.port = port

    @property
    def name(self) -> str:
        return f"{'https' if self._tls else 'http'}://{self._host}:{self.port}"

    async def start(self) -> None:
        mismatch = aiohttp_mismatch()
        if mismatch is not None:
            raise StartError(
                f"aiohttp {aiohttp.__version__} is not shaped as the connection guard "
                f"(http/edge.py) expects: {mismatch}; install an aiohttp the project "
                "supports (pyproject.toml)"
            )
        limits = self.guard.limits
        room = descriptors.connection_room(limits.max_connections)
        self.guard.limits = dataclasses.replace(limits, max_connections=room)
        await super().start()
        loop = asyncio.get_running_loop()
        descriptors.quiet_accept_failures(loop)
        listening = await loop.create_server(
            self.guard,
            self._host,
            self._port,
            ssl=self._tls,
            ssl_handshake_timeout=self.guard.limits.header_timeout_s if self._tls else None,
            backlog=self._listen_backlog,
            reuse_address=True,
        )
        self._server = listening
        if listening.sockets:
            self.port = listening.sockets[0].getsockname()[1]
