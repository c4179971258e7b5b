"""The push endpoints: Prometheus remote write 1.0 and InfluxDB line protocol (v1 and v2).

``POST /api/v1/write`` (snappy protobuf ``WriteRequest``), ``POST /write`` (InfluxDB 1.x,
``?db=&precision=``) and ``POST /api/v2/write`` (InfluxDB 2.x, ``?org=&bucket=&precision=``;
gzip bodies are decoded by aiohttp). Each request is decoded and mapped at once
(``loadwatcher.push``) and its samples put in the ``PushBuffer`` that the engine's next
cycle takes: publishing is per cycle, never per request.

Answers follow what the senders retry on: 204 when taken; 400 for a body that can never
succeed (not snappy, not protobuf, bad precision); 413 over ``push.max_body_bytes`` or
``push.max_series_per_request``; 415 for remote write 2.0; 429 with ``Retry-After`` over
``push.max_samples_per_s`` or while the buffer is full (a retry later succeeds); 401
without a writer's token when ``push.token_file`` is set. Errors are the API's JSON.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson
from aiohttp import web

from loadwatcher.engine.selfmetrics import SelfMetrics
from loadwatcher.http.tokens import TokenFile
from loadwatcher.providers.push.buffer import PushBuffer
from loadwatcher.push import line_protocol, remote_write
from loadwatcher.push.errors import PushError, PushErrorKind
from loadwatcher.push.mapping import (
    Decoded,
    LineProtocolMapping,
    RemoteWriteReceiver,
    map_line_protocol,
)

log = logging.getLogger("loadwatcher.push")

REMOTE_WRITE = "/api/v1/write"
INFLUX_V1 = "/write"
INFLUX_V2 = "/api/v2/write"
PATHS = frozenset({REMOTE_WRITE, INFLUX_V1, INFLUX_V2})

_STATUS = {
    PushErrorKind.NOT_SNAPPY: 400,
    PushErrorKind.NOT_PROTOBUF: 400,
    PushErrorKind.BAD_PRECISION: 400,
    PushErrorKind.TOO_LARGE: 413,
}


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int
    max_series_per_request: int
    max_samples_per_s: int
    publish_interval_s: float


class Refused(Exception):
    """A push answered with an error status (never a traceback)."""

    def __init__(self, status: int, code: str, message: str, retry_after_s: float = 0) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.retry_after_s = retry_after_s


class RateLimit:
    """A token bucket of samples: ``rate`` a second, a second's worth of burst. A request is
    let in while the bucket is not in debt and then pays for what it carried, so the debt
    a large request leaves is paid by the waits of the next ones."""

    def __init__(self, rate: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self._monotonic = monotonic
        self._tokens = rate
        self._at = monotonic()

    def _refill(self) -> None:
        now = self._monotonic()
        self._tokens = min(self.rate, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def wait_s(self) -> float:
        """0 when a request may come in, else how long until it may."""
        self._refill()
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def pay(self, samples: int) -> None:
        self._tokens -= samples


class Receiver:
    """What the push endpoints share: the mapping state, the buffer, the limits, the
    writers' tokens and the metrics."""

    def __init__(
        self,
        buffer: PushBuffer,
        remote: RemoteWriteReceiver,
        line: LineProtocolMapping,
        limits: Limits,
        metrics: SelfMetrics,
        tokens: TokenFile | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.buffer = buffer
        self.remote = remote
        self.line = line
        self.limits = limits
        self.metrics = metrics
        self.tokens = tokens
        self.clock = clock
        self.rate = RateLimit(limits.max_samples_per_s)
        # The mapping state is not thread-safe: one request maps at a time, large bodies in
        # a worker thread so that the loop keeps serving /watcher meanwhile.
        self._mapping = asyncio.Lock()
        for route in (REMOTE_WRITE, INFLUX_V1, INFLUX_V2):
            self.metrics.push_requests.labels(route, "204")
        for outcome in ("received", "accepted"):
            self.metrics.push_samples.labels(outcome)

    # -- the handlers -----------------------------------------------------------------

    async def remote_write(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, REMOTE_WRITE, self._remote_write)

    async def influx_v1(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, INFLUX_V1, self._influx_v1)

    async def influx_v2(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, INFLUX_V2, self._influx_v2)

    async def _handle(
        self, request: web.Request, route: str, decode: Callable[[web.Request], Awaitable[Decoded]]
    ) -> web.StreamResponse:
        try:
            self._authorise(request)
            wait = self.rate.wait_s()
            if wait > 0:
                raise Refused(
                    429,
                    "rate_limited",
                    f"more than push.max_samples_per_s ({self.limits.max_samples_per_s}) "
                    "samples a second; retry later",
                    wait,
                )
            decoded = await decode(request)
            self._take(decoded)
        except Refused as exc:
            self.metrics.push_requests.labels(route, str(exc.status)).inc()
            if exc.status >= 500 or exc.status in (401, 429):
                log.debug("push to %s refused: %s", route, exc.message)
            else:
                log.warning("push to %s refused (%d): %s", route, exc.status, exc.message)
            return _error(exc, route)
        self.metrics.push_requests.labels(route, "204").inc()
        return web.Response(status=204)

    def _authorise(self, request: web.Request) -> None:
        if self.tokens is not None and not self.tokens.accepts_writer(
            request.headers.get("Authorization")
        ):
            raise Refused(401, "unauthorized", "a valid writer token (push.token_file) is required")

    async def _remote_write(self, request: web.Request) -> Decoded:
        content_type = request.headers.get("Content-Type", "")
        if "io.prometheus.write.v2" in content_type:
            raise Refused(
                415,
                "unsupported_media_type",
                "remote write 2.0 is not supported; send remote write 1.0 "
                "(protobuf_message: prometheus.WriteRequest)",
            )
        encoding = request.headers.get("Content-Encoding", "snappy").lower()
        if encoding != "snappy":
            raise Refused(400, "bad_encoding", f"Content-Encoding must be snappy, got {encoding}")
        body = await self._body(request)
        try:
            parsed = remote_write.decode_write_request(body, self.limits.max_body_bytes)
        except PushError as exc:
            raise _refused(exc) from exc
        if len(parsed) > self.limits.max_series_per_request:
            raise Refused(
                413,
                "too_many_series",
                f"{len(parsed)} series in one request, more than "
                f"push.max_series_per_request ({self.limits.max_series_per_request})",
            )
        now = self.clock()
        return await self._map(len(body), lambda: self.remote.map(parsed, now))

    async def _influx_v1(self, request: web.Request) -> Decoded:
        return await self._line_protocol(request, v1=True)

    async def _influx_v2(self, request: web.Request) -> Decoded:
        return await self._line_protocol(request, v1=False)

    async def _line_protocol(self, request: web.Request, *, v1: bool) -> Decoded:
        try:
            unit = line_protocol.precision_ns(request.query.get("precision"), v1=v1)
        except PushError as exc:
            raise _refused(exc) from exc
        body = await self._body(request)
        now = self.clock()
        decoded = await self._map(
            len(body), lambda: map_line_protocol(body, self.line, unit_ns=unit, now=now)
        )
        # Lines of other measurements are skipped unread: counted as lines.
        decoded.counts["unmatched_lines"] = decoded.counts.pop("unmatched", 0)
        if len(decoded.batch.keys) > self.limits.max_series_per_request:
            raise Refused(
                413,
                "too_many_series",
                f"{len(decoded.batch.keys)} series in one request, more than "
                f"push.max_series_per_request ({self.limits.max_series_per_request})",
            )
        return decoded

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(REMOTE_WRITE, self.remote_write)
        app.router.add_post(INFLUX_V1, self.influx_v1)
        app.router.add_post(INFLUX_V2, self.influx_v2)

    # -- shared -------------------------------------------------------------------------

    async def _map(self, size: int, work: Callable[[], Decoded]) -> Decoded:
        async with self._mapping:
            if size < _INLINE_BYTES:
                return work()
            return await asyncio.to_thread(work)

    async def _body(self, request: web.Request) -> bytes:
        """The body, refused as soon as it is larger than ``push.max_body_bytes`` (decoded,
        for a gzip body: aiohttp decodes it as it reads)."""
        cap = self.limits.max_body_bytes
        if request.content_length is not None and request.content_length > cap:
            raise self._too_large()
        parts: list[bytes] = []
        size = 0
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > cap:
                raise self._too_large()
            parts.append(chunk)
        return b"".join(parts)

    def _too_large(self) -> Refused:
        return Refused(
            413,
            "too_large",
            f"body larger than push.max_body_bytes ({self.limits.max_body_bytes} bytes)",
        )

    def _take(self, decoded: Decoded) -> None:
        counts = decoded.counts
        received = counts.get("samples", counts.get("lines", 0))
        self.rate.pay(received)
        if not self.buffer.put(decoded.batch):
            raise Refused(
                429,
                "busy",
                "samples arrive faster than they are published; retry later",
                self.limits.publish_interval_s,
            )
        self.metrics.push_samples.labels("received").inc(received)
        self.metrics.push_samples.labels("accepted").inc(counts.get("accepted", 0))
        for reason, n in counts.items():
            if n and reason not in _NOT_DISCARDS:
                self.metrics.push_samples.labels(_OUTCOMES.get(reason, reason)).inc(n)


# Counts that are not reasons a sample was discarded.
_NOT_DISCARDS = frozenset({"series", "samples", "lines", "accepted"})
# Remote write skips a series of another metric unread: it counts series, not samples.
_OUTCOMES = {"unmatched": "unmatched_series"}
# A body this small maps on the loop faster than a thread hand-off (a Prometheus
# remote-write batch of the default 2,000 samples is ~30 kB).
_INLINE_BYTES = 256 * 1024


def _refused(exc: PushError) -> Refused:
    return Refused(_STATUS.get(exc.kind, 400), str(exc.kind), exc.message)


def _error(exc: Refused, route: str) -> web.Response:
    doc: dict[str, str] = {"error": exc.code, "message": exc.message}
    if route == INFLUX_V2:  # what InfluxDB 2 clients read
        doc["code"] = "too large" if exc.status == 413 else "invalid"
    headers = {}
    if exc.retry_after_s > 0:
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    return web.Response(
        status=exc.status,
        body=orjson.dumps(doc),
        content_type="application/json",
        headers=headers,
    )
