"""HTTP responses prepared once per body, written to the socket in one call.

A published body is served many times per snapshot, always with the same status line and
headers but the ``Date``; aiohttp's ``web.Response`` builds and serialises them again for
every request and joins them with the body into a new buffer. Here each encoding of a body
keeps its head bytes; once per second the head with the current ``Date`` and the body are
joined, as bytes and, for a large body, as an anonymous memory file, and a response is one
``os.sendfile`` of that file (the kernel sends its pages without copying them, as nginx
does), whatever the socket did not take written through the transport.
``benchmarks/fastpaths.py`` measures it against ``web.Response`` (benchmarks/RESULTS.md).

Memory files are file descriptors, so they are bounded: only bodies of at least
``MIN_SPOOL_BYTES`` get one (whole-cluster bodies: a few windows, formats and encodings per
snapshot; one node's body is written through the transport), and at most ``MAX_SPOOLS``
are open at once (further responses are written through the transport). A memory file that
cannot be made for want of descriptors or memory is one log line per burst
(``descriptors.shortage``), and the next second's response tries again.

``PreparedResponse`` is the aiohttp side: a ``StreamResponse`` whose ``prepare`` writes those
bytes to the transport. It answers HTTP/1.1 keep-alive requests, and only while aiohttp
has the shape it relies on (``aiohttp_mismatch``, checked once); other requests get
aiohttp's ordinary response. It runs no ``on_response_prepare`` signals: the app registers
none.
"""

from __future__ import annotations

import asyncio
import errno
import importlib
import inspect
import io
import logging
import os
import time
import weakref
from email.utils import formatdate
from http import HTTPStatus
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http import SERVER_SOFTWARE

from loadwatcher.http import descriptors

if TYPE_CHECKING:
    from loadwatcher.engine.published import Body

log = logging.getLogger("loadwatcher.prepared")

CONTENT_TYPE = "application/json"
# A complete response (head + body) is cached per second up to this size; bigger bodies
# (plain JSON at thousands of nodes) are written after their head without the extra copy.
MAX_JOINED_BYTES = 4 << 20
# Smaller bodies are written through the transport: for them sendfile saves less than making
# their memory file each second costs (benchmarks/RESULTS.md), and the variants asked for
# one node at a time, the many and rare ones, never hold a descriptor.
MIN_SPOOL_BYTES = 1 << 16
# Memory files open at once: room for every large variant (3 windows x 2 formats x 2
# encodings) of two snapshots, the current one and the one whose responses are in flight.
MAX_SPOOLS = 32

# -- Date -----------------------------------------------------------------------------------

_date: tuple[int, bytes] = (-1, b"")


def date_lines(second: int) -> bytes:
    """``Date`` and ``Server`` header lines for ``second``, built once per second."""
    global _date
    if _date[0] != second:
        text = formatdate(second, usegmt=True)
        _date = (second, f"Date: {text}\r\nServer: {SERVER_SOFTWARE}\r\n\r\n".encode("latin-1"))
    return _date[1]


# -- encodings of a body --------------------------------------------------------------------


class EncodedBody:
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
        """Whether ``If-None-Match`` names this encoding (or is ``*``): answer 304."""
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
            self._joined = (second, data, None)  # the old file closes once nothing sends it
            if len(self.payload) >= MIN_SPOOL_BYTES:
                self._joined = (second, data, _spool(data))
        return PreparedResponse(200, self._joined[1], spool=self._joined[2])


class BodyEncodings:
    """The identity and gzip encodings of one body (the gzip ETag gets a ``-gzip`` suffix);
    the identity one is made on its first request, from the body's plain bytes (inflated
    beforehand: ``Body.inflate``)."""

    __slots__ = ("_body", "_identity", "gzip")

    def __init__(self, body: Body) -> None:
        # Weak: the cache holding these drops them when the body goes.
        self._body = weakref.ref(body)
        self._identity: EncodedBody | None = None
        self.gzip = EncodedBody(body.gz, body.etag[:-1] + '-gzip"', "gzip")

    @property
    def identity(self) -> EncodedBody:
        if self._identity is None:
            body = self._body()
            if body is None:  # only while the cache's finalizer is about to drop this
                raise LookupError("the body of these encodings is gone")
            self._identity = EncodedBody(body.raw, body.etag, None)
        return self._identity


class EncodingsCache:
    """The ``BodyEncodings`` of each published body, built on its first request (on the
    event loop: a few header strings) and dropped when the body is: the engine publishes
    bodies, only the HTTP side knows their response heads."""

    def __init__(self) -> None:
        self._by_body: dict[int, BodyEncodings] = {}

    def __call__(self, body: Body) -> BodyEncodings:
        encodings = self._by_body.get(id(body))
        if encodings is None:
            encodings = self._by_body[id(body)] = BodyEncodings(body)
            weakref.finalize(body, self._by_body.pop, id(body), None)
        return encodings


# -- aiohttp ----------------------------------------------------------------------------------


# How aiohttp's server drives a response, beyond its documented API, as a prepared response
# relies on it: ``RequestHandler.finish_response`` calls ``prepare`` then ``write_eof`` and
# reads ``keep_alive``, writing nothing itself; the request hands over its transport and the
# stream writer to wait on. (module, class, coroutine method, its parameters)
_COROUTINES = (
    ("aiohttp.web_response", "StreamResponse", "prepare", ("self", "request")),
    ("aiohttp.web_response", "StreamResponse", "write_eof", ("self", "data")),
    ("aiohttp.http_writer", "StreamWriter", "drain", ("self",)),
    (
        "aiohttp.web_protocol",
        "RequestHandler",
        "finish_response",
        ("self", "request", "resp", "start_time"),
    ),
)
_PROPERTIES = (
    (web.StreamResponse, "keep_alive"),
    (web.BaseRequest, "transport"),
    (web.BaseRequest, "writer"),
    (web.BaseRequest, "version"),
    (web.BaseRequest, "keep_alive"),
)
# PreparedResponse's own attributes: aiohttp's response must not have them.
_OWN_ATTRIBUTES = ("_data", "_tail", "_spool")

_fits: bool | None = None  # decided by the first ``check_aiohttp``


def aiohttp_mismatch() -> str | None:
    """What a prepared response relies on that the installed aiohttp lacks (None: nothing)."""
    for module_name, class_name, method, params in _COROUTINES:
        try:
            fn = getattr(getattr(importlib.import_module(module_name), class_name), method)
        except (ImportError, AttributeError):
            return f"no {class_name}.{method}"
        if not inspect.iscoroutinefunction(fn):
            return f"{class_name}.{method} is not a coroutine function"
        found = tuple(inspect.signature(fn).parameters)
        if found != params:
            return f"{class_name}.{method} takes ({', '.join(found)}), not ({', '.join(params)})"
    for owner, name in _PROPERTIES:
        attr = inspect.getattr_static(owner, name, None)
        if attr is None or inspect.isroutine(attr) or not hasattr(type(attr), "__get__"):
            return f"{owner.__name__}.{name} is not a property"
    response = web.StreamResponse()
    taken = [n for n in _OWN_ATTRIBUTES if hasattr(response, n) or hasattr(type(response), n)]
    if taken:
        return f"StreamResponse has attributes of its own named {', '.join(taken)}"
    return None


def check_aiohttp() -> bool:
    """Whether prepared responses may be used: decided once, and logged if not."""
    global _fits
    if _fits is None:
        mismatch = aiohttp_mismatch()
        if mismatch is not None:
            log.warning(
                "aiohttp %s is not shaped as prepared responses expect (%s): every response "
                "is built by aiohttp instead",
                aiohttp.__version__,
                mismatch,
            )
        _fits = mismatch is None
    return _fits


def json_response(status: int, payload: bytes, with_body: bool = True) -> PreparedResponse:
    """A JSON body made for one request (``/watcher/health``, asked every few hundred
    milliseconds by some readers), its head and bytes written in one call as a published
    body's are: aiohttp's ``web.Response`` costs such a reader more than the body itself."""
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: {CONTENT_TYPE}\r\n"
        f"Content-Length: {len(payload)}\r\n"
    ).encode("latin-1")
    return PreparedResponse(
        status, head + date_lines(int(time.time())) + (payload if with_body else b"")
    )


def can_prepare(request: web.BaseRequest) -> bool:
    """HTTP/1.1 with keep-alive, while aiohttp fits: the requests a prepared response answers."""
    fits = _fits if _fits is not None else check_aiohttp()
    return fits and request.version == (1, 1) and request.keep_alive


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

# Off where the platform lacks memfd/sendfile, and for good after a memfd is refused for
# good (a sandbox that forbids it): responses are then written through the transport.
_spooling = hasattr(os, "memfd_create") and hasattr(os, "sendfile")
# Failures that pass: a descriptor, memory or tmpfs space may be free a second later.
_SHORTAGES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOSPC})
_open_spools = 0


def open_spools() -> int:
    """Memory files open now (each one a file descriptor)."""
    return _open_spools


def _closed(_: object = None) -> None:
    global _open_spools
    _open_spools -= 1


def _spool(data: bytes) -> io.FileIO | None:
    """``data`` in an anonymous memory file, for ``os.sendfile`` (None: write it instead).

    A new file per second and encoding, never rewritten: the kernel may still be sending
    the pages of an older one. It closes when the last response holding it is gone. None
    while ``MAX_SPOOLS`` are open, or when the file cannot be made.
    """
    global _spooling, _open_spools
    if not _spooling or _open_spools >= MAX_SPOOLS:
        return None
    fd = -1
    try:
        fd = os.memfd_create("loadwatcher-body", os.MFD_CLOEXEC)
        spool = io.FileIO(fd, "r+")
    except OSError as exc:
        if fd >= 0:
            os.close(fd)
        _refused(exc)
        return None
    _open_spools += 1
    weakref.finalize(spool, _closed)
    try:
        written = 0
        with memoryview(data) as view:
            while written < len(data):
                step = spool.write(view[written:])
                if not step:
                    raise OSError(errno.ENOSPC, "memory file took no bytes")
                written += step
    except OSError as exc:
        spool.close()
        _refused(exc)
        return None
    return spool


def _refused(exc: OSError) -> None:
    global _spooling
    if exc.errno in _SHORTAGES:
        descriptors.shortage("responses are written without sendfile until it passes", exc)
    else:
        _spooling = False
        log.warning("responses are written without sendfile: %s", exc)


def _sendfile(transport: asyncio.Transport, spool: io.FileIO, size: int) -> int:
    """Send the start of ``spool`` straight from its pages; returns the bytes sent.

    It saves the kernel copying the body into the socket (what nginx saves with sendfile
    too). Only on a plain TCP transport with nothing buffered (the bytes must go out in
    order, and TLS must encrypt them); the caller writes whatever is left through the
    transport, which also meets any socket error.
    """
    if transport.get_write_buffer_size() or transport.get_extra_info("sslcontext") is not None:
        return 0
    sock = transport.get_extra_info("socket")
    if sock is None or spool.closed:
        return 0
    try:
        return os.sendfile(sock.fileno(), spool.fileno(), 0, size)
    except OSError:
        return 0
