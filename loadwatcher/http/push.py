"""The push endpoints: one ``POST`` route per route of each declared push protocol
(``loadwatcher.push.protocol``: remote write 1.0 on ``/api/v1/write``, InfluxDB line
protocol on ``/write`` and ``/api/v2/write``).

Each request is checked and decoded by its protocol's mapper, mapped at once and its
samples put in the ``PushBuffer`` that the engine's next cycle takes: publishing is per
cycle, never per request. Nothing here knows a protocol: the routes, their accepted
encodings, the token parameter, the statuses and the error codes are the declarations'.

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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import orjson
from aiohttp import web

from loadwatcher.engine.selfmetrics import PUSH_TOTALS, SelfMetrics
from loadwatcher.http.edge import CLIENT_CLOSED
from loadwatcher.http.pushlimits import (
    BODIES_IN_FLIGHT,
    BODY_DEADLINE_S,
    BodyBudget,
    Lease,
    RateLimit,
)
from loadwatcher.http.tokens import TokenFile
from loadwatcher.providers.push.buffer import PushBuffer
from loadwatcher.providers.push.series import SeriesBudget
from loadwatcher.push.errors import PushError
from loadwatcher.push.protocol import Mapper, Pending, PushProtocol, PushRequest, Route
from loadwatcher.push.samples import Decoded, servable_only

log = logging.getLogger("loadwatcher.push")


@dataclass(frozen=True)
class PushLimits:
    max_body_bytes: int
    max_series_per_request: int
    max_samples_per_s: int
    publish_interval_s: float


class PushRefused(Exception):
    """A push answered with an error status (never a traceback)."""

    def __init__(self, status: int, code: str, message: str, retry_after_s: float = 0) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Endpoint:
    """One route of a protocol, with the protocol and its mapper."""

    protocol: PushProtocol
    route: Route
    mapper: Mapper


class Receiver:
    """What the push endpoints share: the protocols' mappers, the buffer, the limits, the
    writers' tokens and the metrics."""

    def __init__(
        self,
        buffer: PushBuffer,
        mappers: Sequence[tuple[PushProtocol, Mapper]],
        limits: PushLimits,
        metrics: SelfMetrics,
        tokens: TokenFile | None = None,
        clock: Callable[[], float] = time.time,
        budget: SeriesBudget | None = None,
    ) -> None:
        self.buffer = buffer
        self.budget = budget
        self.mappers = {protocol.name: mapper for protocol, mapper in mappers}
        self.endpoints = {
            route.path: Endpoint(protocol, route, mapper)
            for protocol, mapper in mappers
            for route in protocol.routes
        }
        self.limits = limits
        self.metrics = metrics
        self.tokens = tokens
        self.clock = clock
        self.rate = RateLimit(limits.max_samples_per_s)
        self.bodies = BodyBudget(BODIES_IN_FLIGHT * limits.max_body_bytes)
        # The mapping state is not thread-safe: one request maps at a time, large bodies in
        # a worker thread so that the loop keeps serving /watcher meanwhile.
        self._mapping = asyncio.Lock()
        for path in self.endpoints:
            self.metrics.push_requests.labels(path, "204")
        for outcome in PUSH_TOTALS:
            self.metrics.push_samples.labels(outcome)

    @property
    def paths(self) -> frozenset[str]:
        return frozenset(self.endpoints)

    def add_routes(self, app: web.Application) -> None:
        for path, endpoint in self.endpoints.items():
            app.router.add_post(path, self._handler(endpoint))

    def _handler(self, endpoint: Endpoint) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            return await self._handle(request, endpoint)

        return handle

    # -- one request --------------------------------------------------------------------

    async def _handle(self, request: web.Request, endpoint: Endpoint) -> web.Response:
        route = endpoint.route.path
        try:
            self._authorise(request, endpoint.route)
            self._admit()
            with self.bodies.lease() as lease:
                await self._mapped(request, endpoint, lease)
        except PushRefused as exc:
            return self._refused(exc, endpoint)
        except Exception:
            # A bug, never the sender's fault: counted like any answer, logged once here.
            log.exception("push to %s failed", route)
            return self._refused(
                PushRefused(500, "internal", "the push could not be taken"), endpoint
            )
        self.metrics.push_requests.labels(route, "204").inc()
        return web.Response(status=204)

    async def _mapped(self, request: web.Request, endpoint: Endpoint, lease: Lease) -> None:
        """The request's body read within ``lease``, then decoded and mapped in its turn,
        its samples taken (PushRefused when they cannot be)."""
        asked, body = await self._read(request, endpoint, lease)
        async with self._mapping:
            # Checked again where the samples are put: requests that read their bodies
            # meanwhile must not overfill the buffer. Checked before mapping, never
            # after: the mapping state (raw counters, HA election) takes each sample
            # once, so a body refused after it would lose its samples on the retry.
            self._admit_to_buffer()
            # Decoded in turn: one decoded body (up to push.max_body_bytes) at a time.
            size, work = self._decoded(body, asked, endpoint)
            try:
                decoded = (
                    work.map(self.clock())
                    if size < _INLINE_BYTES
                    else await asyncio.to_thread(work.map, self.clock())
                )
            except PushError as exc:
                # Found while mapping (a label value that is not UTF-8, a series that
                # does not parse): refused whole, before anything of it is kept.
                raise PushRefused(
                    endpoint.protocol.status(exc.kind), str(exc.kind), exc.message
                ) from None
            decoded = servable_only(decoded)
            if work.series is None:
                self._check_series(len(decoded.batch.keys))
            self._check_budget(decoded)
            self._take(decoded)

    def _refused(self, exc: PushRefused, endpoint: Endpoint) -> web.Response:
        route = endpoint.route.path
        self.metrics.push_requests.labels(route, str(exc.status)).inc()
        if exc.status >= 500 or exc.status in (401, 429, CLIENT_CLOSED):
            log.debug("push to %s refused: %s", route, exc.message)
        else:
            log.warning("push to %s refused (%d): %s", route, exc.status, exc.message)
        return _error(exc, endpoint.route)

    def _check_budget(self, decoded: Decoded) -> None:
        if self.budget is None:
            return
        over = self.budget.over(decoded.batch.keys)
        if over:
            raise PushRefused(
                413,
                "series_limit",
                f"the request would take the series held past push.max_series "
                f"({self.budget.limit}) by {over}; it is refused whole",
            )

    async def _read(
        self, request: web.Request, endpoint: Endpoint, lease: Lease
    ) -> tuple[PushRequest, bytes]:
        """The request checked and its body read within ``lease``."""
        protocol, route = endpoint.protocol, endpoint.route
        asked = PushRequest(route, request.query, request.headers.get("Content-Type", ""))
        try:
            endpoint.mapper.check(asked)
        except PushError as exc:
            raise PushRefused(protocol.status(exc.kind), str(exc.kind), exc.message) from None
        encoding = request.headers.get("Content-Encoding", route.default_encoding)
        if encoding.strip().lower() not in route.encodings:
            # The header is not repeated: an error echoes nothing the request sent.
            raise PushRefused(
                400,
                "bad_encoding",
                f"{protocol.title} needs Content-Encoding{route.encoding_hint}",
            )
        return asked, await self._body(request, lease)

    def _decoded(self, body: bytes, asked: PushRequest, endpoint: Endpoint) -> tuple[int, Pending]:
        """The body decoded: its size and what is to map."""
        try:
            pending = endpoint.mapper.read(body, asked, self.limits.max_body_bytes)
        except PushError as exc:
            kind = exc.kind
            raise PushRefused(endpoint.protocol.status(kind), str(kind), exc.message) from None
        if pending.series is not None:
            self._check_series(pending.series)
        return len(body), pending

    def _check_series(self, series: int) -> None:
        if series > self.limits.max_series_per_request:
            raise PushRefused(
                413,
                "too_many_series",
                f"{series} series in one request, more than "
                f"push.max_series_per_request ({self.limits.max_series_per_request})",
            )

    def _admit(self) -> None:
        """Refuse (429) before the body is read while over the rate or the buffer is full."""
        wait = self.rate.wait_s()
        if wait > 0:
            raise PushRefused(
                429,
                "rate_limited",
                f"more than push.max_samples_per_s ({self.limits.max_samples_per_s}) "
                "samples a second; retry later",
                wait,
            )
        self._admit_to_buffer()

    def _admit_to_buffer(self) -> None:
        if self.buffer.full:
            raise PushRefused(
                429,
                "busy",
                "samples arrive faster than they are published; retry later",
                self.limits.publish_interval_s,
            )

    def _busy(self) -> PushRefused:
        return PushRefused(
            429,
            "busy",
            f"more than {BODIES_IN_FLIGHT} bodies' worth (push.max_body_bytes) are being "
            "received at once; retry later",
            self.limits.publish_interval_s,
        )

    def _authorise(self, request: web.Request, route: Route) -> None:
        if self.tokens is None:
            return
        header = request.headers.get("Authorization")
        if header is None and route.token_param and route.token_param in request.query:
            # InfluxDB 1.x clients may send their credentials as ?u=&p= instead.
            header = "Bearer " + request.query[route.token_param]
        if not self.tokens.accepts_writer(header):
            raise PushRefused(
                401, "unauthorized", "a valid writer token (push.token_file) is required"
            )

    # -- shared -------------------------------------------------------------------------

    async def _body(self, request: web.Request, lease: Lease) -> bytes:
        """The body, refused as soon as it is larger than ``push.max_body_bytes`` (decoded,
        for a gzip body: aiohttp decodes it as it reads), when the bodies held at once would
        pass their budget (429), or when it has not all come within ``BODY_DEADLINE_S``."""
        cap = self.limits.max_body_bytes
        if request.content_length is not None and request.content_length > cap:
            raise self._too_large()
        parts: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(BODY_DEADLINE_S):
                async for chunk in request.content.iter_any():
                    size += len(chunk)
                    if size > cap:
                        raise self._too_large()
                    if not lease.take(len(chunk)):
                        raise self._busy()
                    parts.append(chunk)
        except TimeoutError:
            raise PushRefused(
                408, "timeout", f"the body did not arrive within {BODY_DEADLINE_S:g} s"
            ) from None
        except ConnectionError:
            # The sender gave up (its own timeout) or went away: nobody hears the answer,
            # and it is no fault of the service (nginx's 499, in the metrics only).
            raise PushRefused(
                CLIENT_CLOSED, "client_closed", "the sender closed the connection mid-body"
            ) from None
        except web.RequestPayloadError:
            # aiohttp could not decode the gzip (or deflate) body, or the chunked framing
            # is broken: a body that can never succeed.
            raise PushRefused(
                400, "bad_body", "the body is not valid in its Content-Encoding or framing"
            ) from None
        return b"".join(parts)

    def _too_large(self) -> PushRefused:
        return PushRefused(
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
        self.buffer.put_sizes(decoded.node_info)
        self.metrics.push_samples.labels("received").inc(received)
        self.metrics.push_samples.labels("accepted").inc(counts.get("accepted", 0))
        for reason, n in counts.items():
            if n and reason not in _NOT_DISCARDS:
                self.metrics.push_samples.labels(reason).inc(n)


# Counts that are not reasons a sample was discarded.
_NOT_DISCARDS = frozenset({"series", "samples", "lines", "accepted"})
# A body this small maps on the loop faster than a thread hand-off (a Prometheus
# remote-write batch of the default 2,000 samples is ~30 kB).
_INLINE_BYTES = 256 * 1024


def _error(exc: PushRefused, route: Route) -> web.Response:
    doc: dict[str, str] = {"error": exc.code, "message": exc.message}
    if route.error_codes is not None:  # what such clients read: their server's own codes
        doc["code"] = route.error_codes.get(exc.status, route.error_code_default)
    headers = {}
    if exc.retry_after_s > 0:
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    return web.Response(
        status=exc.status,
        body=orjson.dumps(doc),
        content_type="application/json",
        headers=headers,
    )
