"""A RollupSnapshot rendered to response bytes, so that requests never compute on the event loop.

Every body (the default one every scheduler asks for, another window, the KEP format, one
node) is rendered, gzip-compressed and hashed at most once per snapshot, on first request,
in a worker thread; concurrent first requests wait for the same rendering. A snapshot
nobody reads costs no rendering: a scheduler reads every 30 s and a poll comes every 15 s,
so eagerly rendering even the default body would waste every other one, a large share of a
small cluster's poll (benchmarks/RESULTS.md). The first reader of a snapshot waits for it.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from isal import igzip, igzip_lib, isal_zlib

from loadwatcher.pipeline.snapshot import RollupSnapshot
from loadwatcher.wire import fastencode, formats
from loadwatcher.wire.formats import Format

# ISA-L's level 1 is about ten times faster than zlib's default level for a body about a
# tenth larger: clients only need valid gzip, and a body is compressed once per snapshot
# whoever asks for it.
GZIP_LEVEL = 1

# Plain bodies up to this size are kept beside their gzip (one node, a small cluster):
# inflating them again would cost more than they weigh.
KEEP_PLAIN_BYTES = 1 << 16

# gzip's container around deflate (zlib's wbits convention), and the pieces of a body
# compressed at a time (about 300 KB of text at 5,000 nodes).
_GZIP_WBITS = 16 + 15
_STRETCH = 1 << 12

BodyKey = tuple[str, Format, str | None]


class Body:
    """One response body, gzip-compressed, with its strong ETag and its plain length.

    The plain bytes of a large body are dropped once compressed and inflated again on
    first need (``inflate``), then kept: the schedulers' client (Go's ``net/http``) asks
    for gzip, and at 5,000 nodes the plain body alone is 11 MB held for each snapshot.
    """

    __slots__ = ("__weakref__", "_lock", "_raw", "etag", "gz", "size")

    def __init__(self, gz: bytes, etag: str, size: int, raw: bytes | None = None) -> None:
        self.gz = gz
        self.etag = etag
        self.size = size
        self._raw = raw
        self._lock = threading.Lock()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Body) and (self.etag, self.gz) == (other.etag, other.gz)

    def __hash__(self) -> int:
        return hash(self.etag)

    @property
    def inflated(self) -> bool:
        """Whether the plain bytes are at hand (``raw`` costs no work)."""
        return self._raw is not None

    @property
    def raw(self) -> bytes:
        """The plain bytes, inflated from the gzip on first use (CPU work for a large body:
        call ``inflate`` in a worker thread first)."""
        return self.inflate()

    def inflate(self) -> bytes:
        raw = self._raw
        if raw is None:
            with self._lock:  # concurrent first plain requests inflate once
                if self._raw is None:
                    self._raw = igzip_lib.decompress(
                        self.gz, flag=igzip_lib.DECOMP_GZIP, bufsize=max(1, self.size)
                    )
                raw = self._raw
        return raw


def make_body(raw: bytes) -> Body:
    gz = igzip.compress(raw, GZIP_LEVEL, mtime=0)
    return Body(gz, _etag(gz), len(raw), raw if len(raw) <= KEEP_PLAIN_BYTES else None)


def _etag(gz: bytes) -> str:
    # The compressed bytes identify the body as well as the plain ones (compression is
    # deterministic and lossless) and are several times fewer to hash.
    return f'"{hashlib.blake2b(gz, digest_size=12).hexdigest()}"'


def compressed(runs: Iterable[list[bytes]]) -> Body:
    """The body made of the parts of ``runs``, compressed a stretch at a time as the runs
    come: neither the plain text of a large body nor all its parts are ever held (at 20,000
    nodes the parts alone would be 37 MB more at the peak)."""
    pending = iter(runs)
    first = next(pending, [])
    second = next(pending, None)
    if second is None and len(first) <= _STRETCH:
        return make_body(b"".join(first))
    gzip = isal_zlib.compressobj(GZIP_LEVEL, wbits=_GZIP_WBITS)
    out, size = [], 0
    # Each run given up once compressed: ``ordered`` alone holds the first two.
    ordered = itertools.chain([first], [] if second is None else [second], pending)
    del first, second
    for run in ordered:
        for at in range(0, len(run), _STRETCH):
            text = b"".join(run[at : at + _STRETCH])
            size += len(text)
            out.append(gzip.compress(text))
    out.append(gzip.flush())
    gz = b"".join(out)
    return Body(gz, _etag(gz), size)


def render_body(
    snapshot: RollupSnapshot, window: str, fmt: Format, node: str | None
) -> Body | None:
    """The body for a window and format, all nodes or one (None if that node has no data)."""
    runs = fastencode.encode_runs(snapshot, window, fmt, only=node)
    return None if runs is None else compressed(runs)


@dataclass
class Published:
    """A snapshot and the bodies rendered from it so far."""

    snapshot: RollupSnapshot
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
