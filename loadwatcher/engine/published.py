"""A Snapshot rendered to response bytes, so that requests never compute on the event loop.

The body every scheduler asks for — the default format of the default window — is rendered,
gzip-compressed and hashed when the snapshot is published, in the cycle's worker thread.
Every other body (another window, the KEP format, one node) is rendered at most once per
snapshot, on first request, in a worker thread; concurrent first requests wait for the same
rendering. Rendering every window and format eagerly would cost each cycle a large share of
its time and memory for bodies that are rarely asked for.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from dataclasses import dataclass, field

from isal import igzip

from loadwatcher.pipeline.snapshot import Snapshot
from loadwatcher.wire import fastencode, formats
from loadwatcher.wire.formats import Format

# ISA-L's level 1 is about ten times faster than zlib's default level for a body about a
# tenth larger: clients only need valid gzip, and a body is compressed once per snapshot
# whoever asks for it.
GZIP_LEVEL = 1

BodyKey = tuple[str, Format, str | None]


@dataclass(frozen=True)
class Body:
    """One response body, plain and gzip-compressed, with its strong ETag."""

    raw: bytes
    gz: bytes
    etag: str


def make_body(raw: bytes) -> Body:
    gz = igzip.compress(raw, GZIP_LEVEL, mtime=0)
    # The compressed bytes identify the body as well as the plain ones (compression is
    # deterministic and lossless) and are several times fewer to hash.
    digest = hashlib.blake2b(gz, digest_size=12).hexdigest()
    return Body(raw, gz, f'"{digest}"')


def render_body(snapshot: Snapshot, window: str, fmt: Format, node: str | None) -> Body | None:
    """The body for a window and format, all nodes or one (None if that node has no data)."""
    raw = fastencode.encode(snapshot, window, fmt, only=node)
    return None if raw is None else make_body(raw)


@dataclass
class Published:
    """A snapshot and the bodies rendered from it so far."""

    snapshot: Snapshot
    _bodies: dict[BodyKey, Body | None] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _pending: dict[BodyKey, asyncio.Future[Body | None]] = field(default_factory=dict)

    def key(self, window: str | None, fmt: Format, node: str | None = None) -> BodyKey:
        return (formats.pick_window(self.snapshot, window), fmt, node)

    def cached(self, key: BodyKey) -> tuple[bool, Body | None]:
        with self._lock:
            if key in self._bodies:
                return True, self._bodies[key]
        return False, None

    def body_now(self, key: BodyKey) -> Body | None:
        """Render (or reuse) synchronously: for worker threads and tests."""
        hit, body = self.cached(key)
        if hit:
            return body
        body = render_body(self.snapshot, *key)
        with self._lock:
            self._bodies.setdefault(key, body)
            return self._bodies[key]

    async def body(self, window: str | None, fmt: Format, node: str | None = None) -> Body | None:
        """The body, rendered in a worker thread on first use; None for an unknown node."""
        key = self.key(window, fmt, node)
        hit, body = self.cached(key)
        if hit:
            return body
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(asyncio.to_thread(self.body_now, key))
            self._pending[key] = pending
            pending.add_done_callback(lambda _: self._pending.pop(key, None))
        return await asyncio.shield(pending)


def publish(snapshot: Snapshot) -> Published:
    """Render the default body (CPU work: run it in a worker thread)."""
    pub = Published(snapshot)
    pub.body_now(pub.key(None, Format.DEFAULT))
    return pub
