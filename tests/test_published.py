"""Published bodies: lazily rendered once, and the journal form that restarts serve from."""

from __future__ import annotations

import asyncio
import gzip
import struct

import numpy as np
import orjson
import pytest

from loadwatcher import published, render, snapshot
from loadwatcher.model import Resource, Series
from loadwatcher.render import Format
from loadwatcher.store import SampleStore

NAMES = {Resource.CPU: "cpu_q", Resource.MEMORY: "mem_q"}


def make_snapshot(nodes: int = 3) -> snapshot.Snapshot:
    store = SampleStore()
    ts = np.arange(0.0, 1000.0, 15.0)
    rng = np.random.default_rng(3)
    store.add(
        [
            Series(f"n{i}", r, ts, rng.uniform(0, 100, ts.size))
            for i in range(nodes)
            for r in (Resource.CPU, Resource.MEMORY)
        ]
    )
    tags = {f"n{i}": {"quality": "ok", "lastSample": 990} for i in range(nodes)}
    return snapshot.build(store.columns, list(store.keys), 999.5, "Prometheus", NAMES, tags, {})


async def test_bodies_render_once_and_match_the_document() -> None:
    pub = published.publish(make_snapshot())
    default = await pub.body(None, Format.DEFAULT)
    assert default is not None
    assert orjson.loads(default.raw) == render.document(pub.snapshot, "15m", Format.DEFAULT)
    assert gzip.decompress(default.gz) == default.raw
    first, second = await asyncio.gather(pub.body("5m", Format.KEP), pub.body("5m", Format.KEP))
    assert first is second is not None  # concurrent first requests share one rendering
    assert await pub.body("5m", Format.KEP) is first
    assert await pub.body(None, Format.DEFAULT, "nope") is None
    one = await pub.body(None, Format.DEFAULT, "n1")
    assert one is not None and list(orjson.loads(one.raw)["data"]["NodeMetricsMap"]) == ["n1"]


async def test_journal_snapshot_restores_the_same_bodies() -> None:
    pub = published.publish(make_snapshot())
    blob = snapshot.to_bytes(pub.snapshot)
    back = published.from_journal(blob)
    hit, body = back.cached(back.key(None, Format.DEFAULT))
    assert hit and body == (await pub.body(None, Format.DEFAULT))  # rendered on restore
    assert (await back.body("10m", Format.KEP)) == (await pub.body("10m", Format.KEP))
    # The form older journals wrote (snapshot + etag + gzip body) still loads.
    old = struct.pack("<4sII", b"LWP1", len(blob), 4) + blob + b'"x"x' + b"gz"
    assert published.from_journal(old).snapshot.taken_at == 999.5
    for bad in (b"LWP1", old[:30], b"garbage"):
        with pytest.raises(ValueError):
            published.from_journal(bad)
