"""HTTP responses prepared once per body, written to the socket in one call.

A published body is served thousands of times per snapshot, always with the same status
line and headers but the ``Date``. aiohttp's ``web.Response`` rebuilds and serialises those
headers for every request and joins them with the body into a new buffer; at 1,000 nodes
(gzip body ~250 kB) that was ~65 µs of Python per request, more than the kernel's send
(~45 µs). Here each body variant (identity, gzip) keeps its head bytes; once per second the
head with the current ``Date`` and the body are joined, as bytes and as an anonymous memory
file, and a response is one ``os.sendfile`` of that file (the kernel sends its pages
without copying them, as nginx does), the rest, if the socket took only part, written
through the transport. Measured at 1,000 nodes under wrk: ~30 µs user + ~33 µs system
per request, from ~65 + ~45.

``PreparedResponse`` is the aiohttp side: a ``StreamResponse`` whose ``prepare`` writes
those bytes to the transport (and waits while the transport is paused, as aiohttp's
writer does). It serves HTTP/1.1 keep-alive requests only, the ones every scheduler and
load generator sends; the caller gives other requests aiohttp's ordinary response. It runs
no ``on_response_prepare`` signals: the app registers none.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import time
import weakref
from email.utils import formatdate
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http import SERVER_SOFTWARE

if TYPE_CHECKING:
    from loadwatcher.engine.published import Body

log = logging.getLogger("loadwatcher.prepared")

CONTENT_TYPE = "application/json"
# A complete response (head + body) is cached per second up to this size; bigger bodies
# (plain JSON at thousands of nodes) are written after their head without the extra copy.
MAX_JOINED_BYTES = 4 << 20

# -- Accept-Encoding ----------------------------------------------------------------------

_GZIP_NAMES = frozenset({"gzip", "x-gzip"})
_NEGOTIATED: dict[str, bool] = {}
_NEGOTIATED_MAX = 64  # distinct header values remembered; clients send very few


def _quality(params: list[str]) -> float:
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            try:
                q = float(value.strip())
            except ValueError:
                return 0.0  # unreadable weight: treat the coding as not accepted
            return q if 0.0 <= q <= 1.0 else 0.0
    return 1.0


def wants_gzip(header: str) -> bool:
    """Whether to answer gzip to this ``Accept-Encoding`` (RFC 9110 §12.5.3, q-values).

    gzip (or x-gzip, or ``*`` when gzip is not named) must have a weight above 0, and at
    least the weight the client gives ``identity`` when it names it.
    """
    gzip_q: float | None = None
    star_q: float | None = None
    identity_q: float | None = None
    for item in header.split(","):
        coding, *params = item.split(";")
        coding = coding.strip().lower()
        if coding in _GZIP_NAMES:
            gzip_q = max(gzip_q or 0.0, _quality(params))
        elif coding == "*":
            star_q = _quality(params)
        elif coding == "identity":
            identity_q = _quality(params)
    q = gzip_q if gzip_q is not None else (star_q or 0.0)
    return q > 0.0 and (identity_q is None or q >= identity_q)


def accepts_gzip(header: str | None) -> bool:
    """``wants_gzip``, remembered per header value (the same few strings on every request)."""
    if not header:
        return False
    known = _NEGOTIATED.get(header)
    if known is None:
        if len(_NEGOTIATED) >= _NEGOTIATED_MAX:
            _NEGOTIATED.clear()
        known = _NEGOTIATED[header] = wants_gzip(header)
    return known


# -- Date -----------------------------------------------------------------------------------

_date: tuple[int, bytes] = (-1, b"")


def date_lines(second: int) -> bytes:
    """``Date`` and ``Server`` header lines for ``second``, built once per second."""
    global _date
    if _date[0] != second:
        text = formatdate(second, usegmt=True)
        _date = (second, f"Date: {text}\r\nServer: {SERVER_SOFTWARE}\r\n\r\n".encode("latin-1"))
    return _date[1]


# -- Variants -------------------------------------------------------------------------------


class Variant:
    """One encoding of a body: its ETag, its bytes and its response heads (no ``Date``)."""

    __slots__ = ("_joined", "etag", "head_200", "head_304", "payload")

    def __init__(self, payload: bytes, etag: str, encoding: str | None) -> None:
        self.payload = payload
        self.etag = etag
        common = f"ETag: {etag}\r\nVary: Accept-Encoding\r\nCache-Control: no-cache\r\n"
        self.head_304 = f"HTTP/1.1 304 Not Modified\r\n{common}".encode("latin-1")
        coding = f"Content-Encoding: {encoding}\r\n" if encoding else ""
        self.head_200 = (
            f"HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\n{coding}{common}"
            f"Content-Length: {len(payload)}\r\n"
        ).encode("latin-1")
        self._joined: tuple[int, bytes, io.FileIO | None] = (-1, b"", None)

    def matches(self, if_none_match: str | None) -> bool:
        """Whether ``If-None-Match`` names this variant (or is ``*``): answer 304."""
        if if_none_match is None:
            return False
        if if_none_match.strip() == "*":
            return True
        return self.etag in {tag.strip() for tag in if_none_match.split(",")}

    def response(self, status: int, with_body: bool) -> PreparedResponse:
        """A 200 (with or without the body, for HEAD) or 304 response, dated now."""
        second = int(time.time())
        if status == 304:
            return PreparedResponse(304, self.head_304 + date_lines(second))
        if not with_body:
            return PreparedResponse(200, self.head_200 + date_lines(second))
        if len(self.payload) > MAX_JOINED_BYTES:
            return PreparedResponse(200, self.head_200 + date_lines(second), self.payload)
        if self._joined[0] != second:
            data = self.head_200 + date_lines(second) + self.payload
            self._joined = (second, data, _spool(data))
        return PreparedResponse(200, self._joined[1], spool=self._joined[2])


class Variants:
    """The identity and gzip variants of one body (the gzip ETag gets a ``-gzip`` suffix)."""

    __slots__ = ("gzip", "identity")

    def __init__(self, raw: bytes, gz: bytes, etag: str) -> None:
        self.identity = Variant(raw, etag, None)
        self.gzip = Variant(gz, etag[:-1] + '-gzip"', "gzip")


class VariantCache:
    """The ``Variants`` of each published body, built on its first request (microseconds, on
    the event loop) and dropped when the body is: the engine publishes bodies, only the
    HTTP side knows their response heads."""

    def __init__(self) -> None:
        self._by_body: dict[int, Variants] = {}

    def __call__(self, body: Body) -> Variants:
        variants = self._by_body.get(id(body))
        if variants is None:
            variants = self._by_body[id(body)] = Variants(body.raw, body.gz, body.etag)
            weakref.finalize(body, self._by_body.pop, id(body), None)
        return variants


# -- aiohttp ----------------------------------------------------------------------------------


def can_prepare(request: web.BaseRequest) -> bool:
    """HTTP/1.1 with keep-alive: the only requests a prepared response answers."""
    return request.version == (1, 1) and request.keep_alive


class PreparedResponse(web.StreamResponse):
    """A response whose bytes are ready: ``prepare`` writes them, ``write_eof`` has no work."""

    def __init__(
        self, status: int, data: bytes, tail: bytes = b"", spool: io.FileIO | None = None
    ) -> None:
        super().__init__(status=status)
        self._data = data
        self._tail = tail
        self._spool = spool

    @property
    def keep_alive(self) -> bool:
        return True  # only built for keep-alive requests (can_prepare)

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        transport = request.transport
        if transport is None or transport.is_closing():
            # What aiohttp's writer raises too; the server then drops the connection quietly.
            raise ConnectionResetError("cannot write to a closing transport")
        data: bytes | memoryview = self._data
        if self._spool is not None:
            data = data[_sendfile(transport, self._spool, len(data)) :]
        if data:
            transport.write(data)
        if self._tail:
            transport.write(self._tail)
        # Back-pressure: wait while the transport's buffer is over its high-water mark.
        await request.writer.drain()
        return None

    async def write_eof(self, data: bytes = b"") -> None:
        return None


# -- sendfile -------------------------------------------------------------------------------

# Off where the platform lacks memfd/sendfile, and for good after a memfd fails (a sandbox
# that forbids it, a full tmpfs): responses are then written through the transport.
_spooling = hasattr(os, "memfd_create") and hasattr(os, "sendfile")


def _spool(data: bytes) -> io.FileIO | None:
    """``data`` in an anonymous memory file, for ``os.sendfile`` (None where there is none).

    A new file per second and variant, never rewritten: the kernel may still be sending
    the pages of an older one. It closes when the last response holding it is gone.
    """
    global _spooling
    if not _spooling:
        return None
    try:
        spool = io.FileIO(os.memfd_create("loadwatcher-body", os.MFD_CLOEXEC), "r+")
        written = 0
        with memoryview(data) as view:
            while written < len(data):
                step = spool.write(view[written:])
                if not step:
                    raise OSError("memory file took no bytes")
                written += step
    except OSError as exc:
        _spooling = False
        log.warning("responses are written without sendfile: %s", exc)
        return None
    return spool


def _sendfile(transport: asyncio.Transport, spool: io.FileIO, size: int) -> int:
    """Send the start of ``spool`` straight from its pages; returns the bytes sent.

    The copy into the socket was ~15 µs of the kernel's ~50 µs per 250 kB response (what
    nginx saves with sendfile too). Only on a plain TCP transport with nothing buffered
    (the bytes must go out in order, and TLS must encrypt them); the caller writes
    whatever is left through the transport, which also meets any socket error.
    """
    if transport.get_write_buffer_size() or transport.get_extra_info("sslcontext") is not None:
        return 0
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        return os.sendfile(sock.fileno(), spool.fileno(), 0, size)
    except OSError:
        return 0
