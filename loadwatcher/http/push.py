"""The push endpoints: Prometheus remote write 1.0 and InfluxDB line protocol (v1 and v2).

``POST /api/v1/write`` (snappy protobuf ``WriteRequest``), ``POST /write`` (InfluxDB 1.x,
``?db=&precision=``) and ``POST /api/v2/write`` (InfluxDB 2.x, ``?org=&bucket=&precision=``;
gzip bodies are decoded by aiohttp). Each request is decoded and mapped at once
(``loadwatcher.push``) and its samples put in the ``PushBuffer`` that the engine's next
cycle takes: publishing is per cycle, never per request.

Answers follow what the senders retry on: 204 when taken; 400 for a body that can never
succeed (not snappy, not protobuf, not valid gzip, bad precision, a Content-Encoding the
route does not take); 413 over ``push.max_body_bytes`` or ``push.max_series_per_request``;
415 for remote write 2.0; 429 with ``Retry-After`` over ``push.max_samples_per_s`` or while
the buffer is full (a retry later succeeds); 401 without a writer's token when
``push.token_file`` is set. Errors are the API's JSON (with InfluxDB's ``code`` on
``/api/v2/write``) and never repeat what the request sent: a header, a parameter, a piece
of the body.
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


@dataclass(frozen=True)
class _Work:
    """A request read and checked: its body's size and the mapping still to do (under the
    receiver's lock, on the loop or in a worker thread)."""

    size: int
    map: Callable[[], Decoded]


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
        self, request: web.Request, route: str, read: Callable[[web.Request], Awaitable[_Work]]
    ) -> web.StreamResponse:
        try:
            self._authorise(request)
            self._admit()
            work = await read(request)
            async with self._mapping:
                # Checked again where the samples are put: requests that read their bodies
                # meanwhile must not overfill the buffer. Checked before mapping, never
                # after: the mapping state (raw counters, HA election) takes each sample
                # once, so a body refused after it would lose its samples on the retry.
                self._admit_to_buffer()
                decoded = (
                    work.map() if work.size < _INLINE_BYTES else await asyncio.to_thread(work.map)
                )
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

    def _admit(self) -> None:
        """Refuse (429) before the body is read while over the rate or the buffer is full."""
        wait = self.rate.wait_s()
        if wait > 0:
            raise Refused(
                429,
                "rate_limited",
                f"more than push.max_samples_per_s ({self.limits.max_samples_per_s}) "
                "samples a second; retry later",
                wait,
            )
        self._admit_to_buffer()

    def _admit_to_buffer(self) -> None:
        if self.buffer.full:
            raise Refused(
                429,
                "busy",
                "samples arrive faster than they are published; retry later",
                self.limits.publish_interval_s,
            )

    def _authorise(self, request: web.Request) -> None:
        if self.tokens is None:
            return
        header = request.headers.get("Authorization")
        if header is None and request.path == INFLUX_V1 and "p" in request.query:
            # InfluxDB 1.x clients may send their credentials as ?u=&p= instead.
            header = "Bearer " + request.query["p"]
        if not self.tokens.accepts_writer(header):
            raise Refused(401, "unauthorized", "a valid writer token (push.token_file) is required")

    async def _remote_write(self, request: web.Request) -> _Work:
        content_type = request.headers.get("Content-Type", "")
        if "io.prometheus.write.v2" in content_type:
            raise Refused(
                415,
                "unsupported_media_type",
                "remote write 2.0 is not supported; send remote write 1.0 "
                "(protobuf_message: prometheus.WriteRequest)",
            )
        encoding = request.headers.get("Content-Encoding", "snappy").strip().lower()
        if encoding != "snappy":
            # The header is not repeated: an error echoes nothing the request sent.
            raise Refused(400, "bad_encoding", "remote write needs Content-Encoding: snappy")
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

        def work() -> Decoded:
            decoded = self.remote.map(parsed, self.clock())
            # Series of other metrics are skipped unread: counted as series.
            decoded.counts["unmatched_series"] = decoded.counts.pop("unmatched", 0)
            return decoded

        return _Work(len(body), work)

    async def _influx_v1(self, request: web.Request) -> _Work:
        return await self._line_protocol(request, v1=True)

    async def _influx_v2(self, request: web.Request) -> _Work:
        return await self._line_protocol(request, v1=False)

    async def _line_protocol(self, request: web.Request, *, v1: bool) -> _Work:
        try:
            unit = line_protocol.precision_ns(request.query.get("precision"), v1=v1)
        except PushError:
            table = line_protocol.PRECISIONS_V1 if v1 else line_protocol.PRECISIONS_V2
            # Not the core's message: it quotes the parameter, and errors echo nothing.
            raise Refused(
                400, "bad_precision", f"precision must be one of {', '.join(table)}"
            ) from None
        encoding = request.headers.get("Content-Encoding", "").strip().lower()
        if encoding not in _DECODED:
            raise Refused(400, "bad_encoding", "line protocol needs Content-Encoding gzip or none")
        body = await self._body(request)

        def work() -> Decoded:
            decoded = map_line_protocol(body, self.line, unit_ns=unit, now=self.clock())
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

        return _Work(len(body), work)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(REMOTE_WRITE, self.remote_write)
        app.router.add_post(INFLUX_V1, self.influx_v1)
        app.router.add_post(INFLUX_V2, self.influx_v2)

    # -- shared -------------------------------------------------------------------------

    async def _body(self, request: web.Request) -> bytes:
        """The body, refused as soon as it is larger than ``push.max_body_bytes`` (decoded,
        for a gzip body: aiohttp decodes it as it reads)."""
        cap = self.limits.max_body_bytes
        if request.content_length is not None and request.content_length > cap:
            raise self._too_large()
        parts: list[bytes] = []
        size = 0
        try:
            async for chunk in request.content.iter_any():
                size += len(chunk)
                if size > cap:
                    raise self._too_large()
                parts.append(chunk)
        except web.RequestPayloadError:
            # aiohttp could not decode the gzip (or deflate) body, or the chunked framing
            # is broken: a body that can never succeed.
            raise Refused(
                400, "bad_body", "the body is not valid in its Content-Encoding or framing"
            ) from None
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
        # push.max_samples_per_s counts matching samples or not: a series of another metric
        # is skipped unread (its samples uncounted) and costs one.
        self.rate.pay(received + counts.get("unmatched_series", 0))
        self.buffer.put(decoded.batch)
        self.metrics.push_samples.labels("received").inc(received)
        self.metrics.push_samples.labels("accepted").inc(counts.get("accepted", 0))
        for reason, n in counts.items():
            if n and reason not in _NOT_DISCARDS:
                self.metrics.push_samples.labels(reason).inc(n)


# Counts that are not reasons a sample was discarded.
_NOT_DISCARDS = frozenset({"series", "samples", "lines", "accepted"})
# InfluxDB 2's error codes (its platform errors) by status; any other is "invalid".
_INFLUX_CODES = {401: "unauthorized", 413: "request too large", 429: "too many requests"}
# Content-Encodings of a line-protocol body that aiohttp decodes as it reads (or none).
_DECODED = frozenset({"", "identity", "gzip", "deflate"})
# A body this small maps on the loop faster than a thread hand-off (a Prometheus
# remote-write batch of the default 2,000 samples is ~30 kB).
_INLINE_BYTES = 256 * 1024


def _refused(exc: PushError) -> Refused:
    return Refused(_STATUS.get(exc.kind, 400), str(exc.kind), exc.message)


def _error(exc: Refused, route: str) -> web.Response:
    doc: dict[str, str] = {"error": exc.code, "message": exc.message}
    if route == INFLUX_V2:  # what InfluxDB 2 clients read: InfluxDB's own codes
        doc["code"] = _INFLUX_CODES.get(exc.status, "invalid")
    headers = {}
    if exc.retry_after_s > 0:
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    return web.Response(
        status=exc.status,
        body=orjson.dumps(doc),
        content_type="application/json",
        headers=headers,
    )
