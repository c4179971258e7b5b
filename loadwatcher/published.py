"""A Snapshot rendered to response bytes once, so that requests never compute.

Every (window, format) body is rendered, gzip-compressed and hashed when the snapshot is
published. Single-node bodies are rendered on first request and cached on the snapshot.
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass, field

from loadwatcher import render
from loadwatcher.model import WINDOWS
from loadwatcher.render import Format
from loadwatcher.snapshot import Snapshot

GZIP_LEVEL = 6


@dataclass(frozen=True)
class Body:
    """One response body, plain and gzip-compressed, with its strong ETag."""

    raw: bytes
    gz: bytes
    etag: str


def make_body(raw: bytes) -> Body:
    digest = hashlib.blake2b(raw, digest_size=12).hexdigest()
    return Body(raw, gzip.compress(raw, GZIP_LEVEL, mtime=0), f'"{digest}"')


@dataclass
class Published:
    """A snapshot and its pre-rendered bodies."""

    snapshot: Snapshot
    bodies: dict[tuple[str, Format], Body]
    _node_bodies: dict[tuple[str, Format, str], Body] = field(default_factory=dict)

    def body(self, window: str | None, fmt: Format) -> Body:
        return self.bodies[(render.pick_window(self.snapshot, window), fmt)]

    def node_body(self, window: str | None, fmt: Format, node: str) -> Body | None:
        """The body for one node, or None when the node has no data in that window."""
        name = render.pick_window(self.snapshot, window)
        key = (name, fmt, node)
        cached = self._node_bodies.get(key)
        if cached is None:
            doc = render.document(self.snapshot, name, fmt, only=node)
            nodes = doc["data"]["NodeMetricsMap"] if fmt is Format.DEFAULT else doc["data"]
            if not nodes:
                return None
            cached = self._node_bodies[key] = make_body(render.encode(doc))
        return cached


def publish(snapshot: Snapshot) -> Published:
    """Render every window in both formats (CPU work: run it in a worker thread)."""
    bodies = {
        (w.name, fmt): make_body(render.encode(render.document(snapshot, w.name, fmt)))
        for w in WINDOWS
        for fmt in Format
    }
    return Published(snapshot, bodies)
