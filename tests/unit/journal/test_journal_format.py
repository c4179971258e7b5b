"""The journal's file format: sample chunks, the snapshot's two journal forms, and the files
it does not take (moved aside, a new journal started).

No backend: these drive ``Journal`` and ``snapshot`` directly and read the file with plain
``sqlite3`` where the format itself is the point.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from loadwatcher.journal import codec
from loadwatcher.journal.schema import CACHE_KIB, SCHEMA_VERSION
from loadwatcher.journal.sqlite import Journal
from loadwatcher.model import Columns, Resource, Series
from loadwatcher.pipeline import snapshot
from loadwatcher.pipeline.store import SampleStore
from tests.support.faults import journal_rows

NAMES = {Resource.CPU: "cpu_q", Resource.MEMORY: "mem_q"}
KEYS = [("a", Resource.CPU), ("b", Resource.MEMORY)]


def cols(sid: list[int], ts: list[float], val: list[float]) -> Columns:
    return Columns(np.asarray(sid, np.int64), np.asarray(ts, float), np.asarray(val, float))


def make_snapshot_and_store(nodes: int = 4) -> tuple[snapshot.RollupSnapshot, SampleStore]:
    store = SampleStore()
    ts = np.arange(0.0, 1000.0, 15.0)
    rng = np.random.default_rng(7)
    store.add(
        [
            Series(f"n{i}", r, ts[i:], rng.uniform(0, 100, ts.size - i))
            for i in range(nodes)
            for r in (Resource.CPU, Resource.MEMORY)
        ]
    )
    tags = {
        f"n{i}": {"quality": "ok", "lastSample": 990, "detail": {"x": [1, 2]}} for i in range(nodes)
    }
    info = {"n0": {"capacity_cpu": "4", "allocatable_memory": "16Gi"}}
    snap = snapshot.build(store.columns, list(store.keys), 999.5, "Prometheus", NAMES, tags, info)
    return snap, store


def make_snapshot(nodes: int = 4) -> snapshot.RollupSnapshot:
    return make_snapshot_and_store(nodes)[0]


def assert_same(a: snapshot.RollupSnapshot, b: snapshot.RollupSnapshot) -> None:
    assert (a.taken_at, a.source, a.keys, a.metric_names) == (
        b.taken_at,
        b.source,
        b.keys,
        b.metric_names,
    )
    assert (a.tags, a.node_info) == (b.tags, b.node_info)
    assert a.windows.keys() == b.windows.keys()
    for name, w in a.windows.items():
        v = b.windows[name]
        assert (w.window, w.start, w.end) == (v.window, v.start, v.end)
        for x, y in ((w.sids, v.sids), (w.count, v.count), (w.newest, v.newest)):
            assert np.array_equal(x, y) and x.dtype == y.dtype
        assert list(w.values) == list(v.values)
        for op in w.values:
            assert np.array_equal(w.values[op], v.values[op])  # bit for bit, not approximately


def test_the_journal_keeps_the_snapshot_without_windows_and_rebuilds_the_same_ones() -> None:
    snap, store = make_snapshot_and_store()
    body = snapshot.encode_without_windows(snap)
    assert body.startswith(b"LWS3") and len(body) < 1000
    without_windows = snapshot.decode(body)
    assert isinstance(without_windows, snapshot.SnapshotWithoutWindows)
    assert_same(snap, without_windows.build(store.columns, list(store.keys)))


def test_the_whole_snapshot_written_at_shutdown_reads_back_exactly() -> None:
    snap = make_snapshot()
    back = snapshot.decode(snapshot.encode_whole(snap))
    assert isinstance(back, snapshot.RollupSnapshot)
    assert_same(snap, back)


def test_damaged_snapshot_bytes_are_a_value_error() -> None:
    without_windows = snapshot.encode_without_windows(make_snapshot())
    whole = snapshot.encode_whole(make_snapshot())
    for bad in (
        without_windows[:6],
        without_windows[:-8],
        b"LWS3" + b"\x1f\x8b" + b"\xff" * 20,
        whole[:6],
        whole[:-8],
        whole + b"\0" * 8,
        b"LWS2" + b"\xff" * 20,
        b"LWP1",
        b"{}",
        b"",
    ):
        with pytest.raises(ValueError):
            snapshot.decode(bad)


async def write(db: Path, *cycles: tuple[Columns, float]) -> None:
    journal = Journal(str(db))
    await journal.open()
    try:
        for added, trim_before in cycles:
            await journal.write_cycle(KEYS, added, trim_before, b"snap", 1.0)
    finally:
        await journal.close()


async def load(db: Path, since: float) -> Columns:
    journal = Journal(str(db))
    await journal.open()
    try:
        recovered = await journal.load_samples(since)
    finally:
        await journal.close()
    assert recovered.keys == KEYS
    return recovered.samples


async def test_the_journal_keeps_a_small_page_cache_and_the_stores_own_keys(
    tmp_path: Path,
) -> None:
    # 10,000 series: tuples and ints held once, by the store, not a second time here.
    journal = Journal(str(tmp_path / "lw.db"))
    await journal.open()
    try:
        async with journal._conn().execute("PRAGMA cache_size") as cur:
            assert (await cur.fetchone()) == (-CACHE_KIB,)
        keys = [(f"n{i}", r) for i in range(3) for r in Resource]
        await journal.write_cycle(keys, cols([0, 5], [1, 1], [1, 2]), 0, b"snap", 1.0)
        held = {id(k) for k in journal.ids.by_key}
        assert held == {id(k) for k in keys}
        recovered = await journal.load_samples(0)
        assert {id(k) for k in journal.ids.by_key} == {id(k) for k in recovered.keys}
        assert recovered.keys == keys and recovered.samples.sid.tolist() == [0, 5]
    finally:
        await journal.close()


async def test_after_a_load_the_first_write_maps_the_stores_tuples_if_they_are_the_same(
    tmp_path: Path,
) -> None:
    """The store takes the first poll's key tuples after a load (``SampleStore._share``):
    the journal's map follows at the next write, once, and only when it names the very
    same series in the same order; else it keeps its own."""
    db = tmp_path / "lw.db"
    keys = [(f"n{i}", r) for i in range(3) for r in Resource]
    journal = Journal(str(db))
    await journal.open()
    await journal.write_cycle(keys, cols([0, 5], [1, 1], [1, 2]), 0, b"snap", 1.0)
    await journal.close()
    for same in (True, False):
        journal = Journal(str(db))
        await journal.open()
        try:
            loaded = (await journal.load_samples(0)).keys
            polled = [("".join(node), r) for node, r in loaded]
            if not same:  # two series swapped: not the file's order
                polled[0], polled[1] = polled[1], polled[0]
            fids = dict(journal.ids.by_key)
            await journal.write_cycle(polled, cols([], [], []), 0, b"snap", 2.0)
            held = {id(k) for k in journal.ids.by_key}
            assert held == {id(k) for k in (polled if same else loaded)}
            assert journal.ids.by_key == fids
            # Once: a later write maps nothing anew.
            again = [("".join(node), r) for node, r in polled]
            await journal.write_cycle(again, cols([], [], []), 0, b"snap", 3.0)
            assert {id(k) for k in journal.ids.by_key} == held
        finally:
            await journal.close()


async def test_a_restore_holds_one_string_a_node_in_file_id_order(tmp_path: Path) -> None:
    """The restored keys share one name string a node (they become the store's, held for
    the whole life of the process), in file id order."""
    db = tmp_path / "lw.db"
    keys = [(f"node-{i}", r) for i in range(3) for r in (Resource.MEMORY, Resource.CPU)]
    journal = Journal(str(db))
    await journal.open()
    try:
        await journal.write_cycle(keys, cols([0, 1, 5], [1, 1, 1], [1, 2, 3]), 0, b"s", 1.0)
    finally:
        await journal.close()
    journal = Journal(str(db))
    await journal.open()
    try:
        stored = await journal.load_samples(0)
    finally:
        await journal.close()
    assert stored.keys == keys
    assert stored.samples.sid.tolist() == [0, 1, 5]
    assert all(stored.keys[i][0] is stored.keys[i + 1][0] for i in (0, 2, 4))


async def test_one_chunk_per_small_cycle_and_whole_chunks_expire(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    await write(
        db,
        (cols([0, 0, 1], [10, 20, 20], [1, 2, 3]), 0),
        (cols([1, 0], [30, 30], [4, 5]), 0),
        (cols([0], [40], [6]), 25),  # the first chunk's newest sample (20) is now too old
    )
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 2
        assert sorted(journal_rows(conn)) == [
            ("a", "cpu", 30.0, 5.0),
            ("a", "cpu", 40.0, 6.0),
            ("b", "memory", 30.0, 4.0),
        ]
    got = await load(db, 35)  # reads filter inside a chunk too
    assert (got.sid.tolist(), got.ts.tolist(), got.val.tolist()) == ([0], [40.0], [6.0])


async def test_a_large_cycle_is_written_in_bounded_rows_and_reads_back_whole(
    tmp_path: Path,
) -> None:
    db = tmp_path / "lw.db"
    n = codec.ROW_SAMPLES * 2 + 5
    sid = np.repeat([0, 1], [n // 2, n - n // 2])
    ts = np.concatenate([np.arange(n // 2), np.arange(n - n // 2)]).astype(float)
    val = np.linspace(0.0, 100.0, n)
    await write(db, (cols(sid.tolist(), ts.tolist(), val.tolist()), 0))
    with sqlite3.connect(db) as conn:
        sizes = [row[0] for row in conn.execute("SELECT n FROM chunks ORDER BY rowid")]
    assert sizes == [codec.ROW_SAMPLES, codec.ROW_SAMPLES, 5]
    got = await load(db, 0)
    assert got.sid.tolist() == sid.tolist()
    assert got.ts.tolist() == ts.tolist()
    assert got.val.tolist() == val.tolist()


async def test_a_sample_written_twice_reads_back_once_with_the_last_value(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    await write(db, (cols([1, 0], [20, 10], [1, 2]), 0), (cols([0, 1], [10, 30], [7, 8]), 0))
    got = await load(db, 0)
    assert got.sid.tolist() == [0, 1, 1]
    assert got.ts.tolist() == [10.0, 20.0, 30.0]
    assert got.val.tolist() == [7.0, 1.0, 8.0]


async def test_a_torn_chunk_is_dropped_and_counted_not_a_crash(tmp_path: Path) -> None:
    """Columns of different lengths under a checksum that matches them (as a buggy writer
    would leave): the row is left out, the others are read."""
    db = tmp_path / "lw.db"
    await write(db, (cols([0, 1], [10, 10], [1, 2]), 0), (cols([0], [20], [3]), 0))
    torn = np.zeros(1, "<f8").tobytes()
    with sqlite3.connect(db) as conn:
        sid_b, val_b = conn.execute("SELECT sid, val FROM chunks WHERE id = 1").fetchone()
        conn.execute(
            "UPDATE chunks SET ts = ?, crc = ? WHERE id = 1",
            (torn, codec.checksum(sid_b, torn, val_b)),
        )
    journal = Journal(str(db))
    await journal.open()
    try:
        got = await journal.load_samples(0)
    finally:
        await journal.close()
    assert got.refused == codec.Refused(damaged_rows=1)
    assert (got.samples.sid.tolist(), got.samples.ts.tolist()) == ([0], [20.0])


async def test_series_of_a_resource_this_version_does_not_know_are_left_out(
    tmp_path: Path,
) -> None:
    """A file written by a later version with another resource: its samples are not loaded
    (and never crash the start), the known series load as usual."""
    db = tmp_path / "lw.db"
    await write(db, (cols([0, 1], [10, 10], [1, 2]), 0))
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO series (id, node, resource) VALUES (7, 'g', 'tpu')")
        conn.execute(
            codec.INSERT,
            codec.encode(np.array([7, 0]), np.array([20.0, 20.0]), np.array([50.0, 3.0])),
        )
    samples = await load(db, 0)
    assert (samples.sid.tolist(), samples.ts.tolist(), samples.val.tolist()) == (
        [0, 0, 1],
        [10.0, 20.0, 10.0],
        [1.0, 3.0, 2.0],
    )


def quarantined_files(db: Path, why: str = "corrupt") -> list[Path]:
    moved = db.parent.glob(f"{db.name}.{why}-*")
    return sorted(p for p in moved if not p.name.endswith(("-wal", "-shm")))


async def assert_moved_aside_and_replaced(db: Path, reason: str, why: str = "corrupt") -> None:
    """Opening ``db`` moves it aside (``<db>.<why>-<t>``) for ``reason`` and starts a new,
    working journal."""
    before = db.read_bytes()
    journal = Journal(str(db))
    report = await journal.open()
    try:
        assert report.quarantined is not None and reason in (report.reason or "")
        assert [Path(report.quarantined)] == quarantined_files(db, why)
        assert Path(report.quarantined).read_bytes() == before  # kept as it was
        await journal.write_cycle(KEYS, cols([0], [10], [1]), 0, b"snap", 1.0)
    finally:
        await journal.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0] == str(
            SCHEMA_VERSION
        )
    assert (await load(db, 0)).ts.tolist() == [10.0]
    assert len(quarantined_files(db, why)) == 1  # the new file opens as it is


@pytest.mark.parametrize("version", ["1", "2", "x"])
async def test_a_file_of_another_schema_version_is_moved_aside(
    tmp_path: Path, version: str
) -> None:
    """No version with another schema was released: nothing to convert."""
    db = tmp_path / "lw.db"
    with sqlite3.connect(db) as conn:
        conn.executescript(
            f"""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE chunks (id INTEGER PRIMARY KEY, payload BLOB);
            INSERT INTO meta VALUES ('schema', '{version}');
            """
        )
    await assert_moved_aside_and_replaced(db, f"unknown journal schema version {version}")


async def test_a_newer_versions_journal_is_moved_aside_as_newer_not_corrupt(
    tmp_path: Path,
) -> None:
    """A rollback after an upgrade: the file is kept as it was under a name that says why,
    for the newer version to read again, and must not be mixed with this one's tables."""
    db = tmp_path / "lw.db"
    with sqlite3.connect(db) as conn:
        conn.executescript(
            f"""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            INSERT INTO meta VALUES ('schema', '{SCHEMA_VERSION + 1}');
            """
        )
    reason = f"newer loadwatcher: journal schema {SCHEMA_VERSION + 1}, this one reads"
    await assert_moved_aside_and_replaced(db, reason, "newer")
    assert not quarantined_files(db)  # nothing called corrupt


async def test_a_file_failing_its_quick_check_is_moved_aside(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    await write(db, (cols([0, 1], [10, 10], [1, 2]), 0))
    with sqlite3.connect(db) as conn:
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'chunks_ts_max'")
        page = root.fetchone()[0]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with db.open("r+b") as f:  # an impossible cell count in the index's page header
        f.seek((page - 1) * page_size + 3)
        f.write(b"\xff\xff")
    await assert_moved_aside_and_replaced(db, "integrity check failed: Page")
