"""Published bodies: lazily rendered once, and the same again from the journal's recipe."""

from __future__ import annotations

import asyncio
import gzip
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from loadwatcher.engine import Engine, EngineOptions, published
from loadwatcher.journal.sqlite import Journal
from loadwatcher.model import Resource, Series
from loadwatcher.pipeline import snapshot
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.wire import formats
from loadwatcher.wire.formats import Format
from tests.support.restarts import Backend

NAMES = {Resource.CPU: "cpu_q", Resource.MEMORY: "mem_q"}


def make_store(nodes: int = 3) -> SampleStore:
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
    return store


def snapshot_of(store: SampleStore) -> snapshot.RollupSnapshot:
    nodes = sorted({node for node, _ in store.keys})
    tags = {node: {"quality": "ok", "lastSample": 990} for node in nodes}
    return snapshot.build(store.columns, list(store.keys), 999.5, "Prometheus", NAMES, tags, {})


def make_snapshot(nodes: int = 3) -> snapshot.RollupSnapshot:
    return snapshot_of(make_store(nodes))


async def test_bodies_render_once_and_match_the_document() -> None:
    pub = published.Published(make_snapshot())
    default = await pub.body(None, Format.DEFAULT)
    assert default is not None
    assert orjson.loads(default.raw) == formats.document(pub.snapshot, "15m", Format.DEFAULT)
    assert gzip.decompress(default.gz) == default.raw
    first, second = await asyncio.gather(pub.body("5m", Format.KEP), pub.body("5m", Format.KEP))
    assert first is second is not None  # concurrent first requests share one rendering
    assert await pub.body("5m", Format.KEP) is first
    assert await pub.body(None, Format.DEFAULT, "nope") is None
    one = await pub.body(None, Format.DEFAULT, "n1")
    assert one is not None and list(orjson.loads(one.raw)["data"]["NodeMetricsMap"]) == ["n1"]


async def test_a_snapshot_rebuilt_from_its_journal_recipe_serves_the_same_bytes() -> None:
    store = make_store()
    snap = snapshot_of(store)
    pub = published.Published(snap)
    recipe = snapshot.decode(snapshot.encode_without_windows(snap))
    assert isinstance(recipe, snapshot.SnapshotWithoutWindows)
    back = published.Published(recipe.build(store.columns, list(store.keys)))
    for window, fmt in ((None, Format.DEFAULT), ("10m", Format.KEP), ("5m", Format.DEFAULT)):
        assert (await back.body(window, fmt)) == (await pub.body(window, fmt))


async def test_a_cycle_renders_nothing_until_a_reader_asks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rendered: list[published.BodyKey] = []
    real = published.render_body

    def counting(snap: snapshot.RollupSnapshot, *key: Any) -> published.Body | None:
        rendered.append(key)
        return real(snap, *key)

    monkeypatch.setattr(published, "render_body", counting)
    now = [1_700_000_000.0]
    options = EngineOptions(poll_interval_s=15.0, retention_s=1020.0)
    engine = Engine(
        Backend(), Journal(str(tmp_path / "lw.db")), options, NAMES, clock=lambda: now[0]
    )
    await engine.recover()
    for _ in range(3):
        await engine.cycle(now[0])
        now[0] += 15
    assert engine.current is not None and rendered == []
    pub = engine.current
    assert pub.cached(pub.key(None, Format.DEFAULT)) == (False, None)
    asked = [pub.body(None, Format.DEFAULT) for _ in range(2)]
    first, again = await asyncio.gather(*asked)  # concurrent first readers: one rendering
    assert first is not None and first is again and len(rendered) == 1
    assert orjson.loads(first.raw) == formats.document(pub.snapshot, "15m", Format.DEFAULT)
    await engine.close()


@pytest.mark.parametrize(
    "runs", [[], [0], [4], [5], [4, 4], [1, 0, 3], [9, 1], [2, 2, 2, 2], [0, 0], [3, 12, 1]]
)
def test_a_body_compressed_a_stretch_at_a_time_inflates_to_its_parts(
    monkeypatch: pytest.MonkeyPatch, runs: list[int]
) -> None:
    """Runs of parts taken as they come, a stretch at a time, however many and however long
    against the stretch (none, empty, fewer, exactly one or two, one part over): the gzip
    inflates to their concatenation, its size and ETag say so, and only a body of one short
    run keeps its plain bytes."""
    monkeypatch.setattr(published, "_STRETCH", 4)
    counter = iter(range(100))
    made = [[f"part {i};".encode() * (i + 1) for i in itertools.islice(counter, n)] for n in runs]
    parts = [p for run in made for p in run]
    body = published.compressed(iter(made))
    assert body.inflated == (len(runs) <= 1 and len(parts) <= 4)
    assert gzip.decompress(body.gz) == b"".join(parts) == body.raw
    assert body.size == len(b"".join(parts))
    assert body.etag == published._etag(body.gz)
