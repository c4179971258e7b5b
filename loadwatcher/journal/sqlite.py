"""The SQLite journal: raw samples and the last snapshot, so a restart serves at once.

The snapshot row holds the snapshot's recipe (``snapshot.to_journal``): the rollups are
rebuilt from the samples, written in the same transaction.

WAL mode, one connection (one writer), one transaction per cycle. ``synchronous=NORMAL``
is enough: in WAL mode a killed process never loses a committed transaction (only a power
loss can lose the last ones), and the file is never corrupted.

Series ids in the file are normally the store's series ids (both are assigned in
first-seen order and the store is loaded from the file at start). The journal still keeps
the store-id -> file-id map explicitly (one small array, one ``take`` per write), so that a
journal opened late -- the disk was read-only or full at start and came back -- can write
into a file that already holds series of an earlier run without mixing them up.

A failed write (disk full, read-only, I/O error) rolls back only if a transaction is still
open (SQLite may already have rolled it back itself), never masks the original error, and
leaves the connection usable: the next write simply tries again. The engine keeps the
samples of failed writes and hands them to the next write (see ``Engine._persist``).

The file is created owner-only (0600). A file that is not a database, or fails its
integrity check, is moved aside (``<name>.corrupt-<unix time>``) and a new one started:
the service must not crash-loop on it, and the bad file is kept for inspection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite
import numpy as np

from loadwatcher.errors import JournalError
from loadwatcher.journal import codec
from loadwatcher.model import Columns, Resource

SCHEMA_VERSION = 2
_RESOURCES = {str(r): r for r in Resource}

# Samples are written as one row per cycle ("chunk"): three little-endian arrays (file
# series id, time, value). A row per sample cost ~190 ms per steady cycle and ~2 s for a
# cold start at 5,000 nodes; a chunk is one INSERT of a few hundred kilobytes. Retention
# drops whole chunks once their newest sample is too old, and reads filter by time.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS series (
    id INTEGER PRIMARY KEY, node TEXT NOT NULL, resource TEXT NOT NULL,
    UNIQUE (node, resource));
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY, ts_min REAL NOT NULL, ts_max REAL NOT NULL, n INTEGER NOT NULL,
    sid BLOB NOT NULL, ts BLOB NOT NULL, val BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_ts_max ON chunks (ts_max);
CREATE TABLE IF NOT EXISTS snapshot (
    id INTEGER PRIMARY KEY CHECK (id = 1), taken_at REAL NOT NULL, body BLOB NOT NULL);
"""


_PUT_SNAPSHOT = "INSERT OR REPLACE INTO snapshot (id, taken_at, body) VALUES (1, ?, ?)"


@dataclass(frozen=True)
class Recovered:
    """What the journal held at start."""

    keys: list[tuple[str, Resource]]
    samples: Columns


@dataclass(frozen=True)
class OpenReport:
    """How opening went: ``quarantined`` names the file moved aside, if any."""

    quarantined: str | None = None


class Journal:
    """One SQLite file; every method raises JournalError, never sqlite3 errors."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._db: aiosqlite.Connection | None = None
        # File series id of each store series id (index = store id), and every series the
        # file holds, by key, with the next free id.
        self._file_ids: list[int] = []
        self._lookup = np.empty(0, np.int64)
        self._ids_by_key: dict[tuple[str, Resource], int] = {}
        self._next_id = 0

    @property
    def is_open(self) -> bool:
        return self._db is not None

    async def open(self) -> OpenReport:
        """Open (creating owner-only), check, and prepare the schema."""
        quarantined = None
        try:
            try:
                await self._connect()
                await self._check()
            except sqlite3.DatabaseError as exc:
                await self._close_quietly()
                if isinstance(exc, sqlite3.OperationalError) and not _is_corruption(exc):
                    raise JournalError(f"cannot open journal {self.path}: {exc}") from exc
                quarantined = self._quarantine()
                try:
                    await self._connect()
                    await self._check()
                except sqlite3.Error as exc2:
                    raise JournalError(f"cannot create journal {self.path}: {exc2}") from exc2
            await self._read_series()
        except JournalError:
            await self._close_quietly()
            raise
        except OSError as exc:  # also from the quarantine's rename (read-only directory)
            await self._close_quietly()
            reason = exc.strerror or str(exc)
            raise JournalError(f"cannot open journal {self.path}: {reason}") from exc
        except sqlite3.Error as exc:
            await self._close_quietly()
            raise JournalError(f"cannot read journal {self.path}: {exc}") from exc
        return OpenReport(quarantined)

    async def _read_series(self) -> None:
        async with self._conn().execute("SELECT id, node, resource FROM series") as cur:
            rows = list(await cur.fetchall())
        self._ids_by_key = {
            (str(r[1]), resource): int(r[0])
            for r in rows
            # Series of a resource this version does not know are left alone.
            if (resource := _RESOURCES.get(str(r[2]))) is not None
        }
        self._next_id = max((int(r[0]) for r in rows), default=-1) + 1
        self._set_file_ids([])

    async def _connect(self) -> None:
        path = Path(self.path)
        if path.parent != Path("") and not path.parent.exists():
            path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
        self._db = await aiosqlite.connect(self.path, isolation_level=None)
        # Large pages for a file of large blobs (a cycle's chunk, the snapshot): fewer
        # overflow pages and WAL frames; at 5,000 nodes 64 KiB instead of 4 KiB took the
        # steady write from ~13 to ~5 ms and its fold from ~17 to ~8 ms. It only applies
        # to a new file (before the first table and before WAL mode).
        await self._db.execute("PRAGMA page_size=65536")
        await self._db.execute("PRAGMA journal_mode=WAL")
        await self._db.execute("PRAGMA synchronous=NORMAL")
        await self._db.execute("PRAGMA busy_timeout=2000")
        # No checkpoint inside a cycle's commit (it doubled the write at 5,000 nodes): the
        # engine calls ``fold_wal`` after the cycle, in the idle time before the next poll.
        await self._db.execute("PRAGMA wal_autocheckpoint=0")

    async def _check(self) -> None:
        db = self._conn()
        # quick_check is the cheap form of integrity_check: it skips index cross-checks.
        async with db.execute("PRAGMA quick_check") as cur:
            row = await cur.fetchone()
        if row is None or row[0] != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {row[0] if row else '?'}")
        await db.executescript(_SCHEMA)
        async with db.execute("SELECT value FROM meta WHERE key = 'schema'") as cur:
            row = await cur.fetchone()
        if row is None:
            await db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif row[0] == "1":
            await self._migrate_from_1()
        elif row[0] != str(SCHEMA_VERSION):
            raise sqlite3.DatabaseError(f"unknown journal schema version {row[0]}")

    async def _migrate_from_1(self) -> None:
        """Schema 1 kept a row per sample: move them into one chunk, in one transaction."""
        db = self._conn()
        await db.execute("BEGIN IMMEDIATE")
        try:
            async with db.execute("SELECT series, ts, value FROM samples") as cur:
                rows = list(await cur.fetchall())
            if rows:
                arr = np.asarray(rows, np.float64)
                await db.execute(
                    codec.INSERT, codec.encode(arr[:, 0].astype(np.int64), arr[:, 1], arr[:, 2])
                )
            await db.execute("DROP TABLE samples")
            await db.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema'", (str(SCHEMA_VERSION),)
            )
            await db.execute("COMMIT")
        except BaseException:
            await self._rollback()
            raise

    def _quarantine(self) -> str:
        target = f"{self.path}.corrupt-{int(time.time())}"
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.path + suffix):
                os.replace(self.path + suffix, target + suffix)
        return target

    def _conn(self) -> aiosqlite.Connection:
        if self._db is None:
            raise JournalError("journal is not open")
        return self._db

    async def load_snapshot(self) -> bytes | None:
        """The last snapshot's serialised body, if any."""
        try:
            async with self._conn().execute("SELECT body FROM snapshot WHERE id = 1") as cur:
                row = await cur.fetchone()
        except sqlite3.Error as exc:
            raise JournalError(f"cannot read snapshot from {self.path}: {exc}") from exc
        return bytes(row[0]) if row else None

    async def load_samples(self, since: float) -> Recovered:
        """Every series and the samples not older than ``since``, time-ordered per series."""
        db = self._conn()
        try:
            async with db.execute("SELECT id, node, resource FROM series ORDER BY id") as cur:
                rows = list(await cur.fetchall())
            async with db.execute(
                "SELECT sid, ts, val FROM chunks WHERE ts_max >= ? ORDER BY id", (since,)
            ) as cur:
                rows_c = list(await cur.fetchall())
        except sqlite3.Error as exc:
            raise JournalError(f"cannot read samples from {self.path}: {exc}") from exc
        # A dict, not Resource(name): the enum's constructor cost ~20 ms at 10,000 series.
        known = [(r[0], r[1], resource) for r in rows if (resource := _RESOURCES.get(str(r[2])))]
        keys = [(str(node), resource) for _, node, resource in known]
        self._set_file_ids([int(r[0]) for r in known])  # store id i <-> known[i]
        ids = np.asarray([int(r[0]) for r in known], np.int64)
        try:
            # ~50 ms of numpy at 5,000 nodes: off the event loop, which may already be
            # serving the snapshot restored before the samples.
            samples = await asyncio.to_thread(_samples_since, rows_c, ids, since)
        except ValueError as exc:
            raise JournalError(f"cannot read samples from {self.path}: {exc}") from exc
        return Recovered(keys, samples)

    async def write_cycle(
        self,
        keys: list[tuple[str, Resource]],
        added: Columns,
        trim_before: float,
        snapshot_body: bytes,
        taken_at: float,
    ) -> None:
        """One transaction: new series, a chunk of new samples, retention trim, the snapshot.

        ``keys`` are the store's series (index = store id) and ``added.sid`` store ids.
        Nothing is remembered of a write that fails: the next one retries the new series.
        """
        db = self._conn()
        file_ids, new_series, next_id = self._map_new(keys)
        lookup = self._lookup if len(file_ids) == len(self._file_ids) else None
        if lookup is None:
            lookup = np.asarray(file_ids, np.int64)
        sid = lookup[added.sid] if len(added) else added.sid
        try:
            await db.execute("BEGIN IMMEDIATE")
            try:
                if new_series:
                    await db.executemany(
                        "INSERT OR IGNORE INTO series (id, node, resource) VALUES (?, ?, ?)",
                        new_series,
                    )
                if len(added):
                    await db.execute(codec.INSERT, codec.encode(sid, added.ts, added.val))
                await db.execute("DELETE FROM chunks WHERE ts_max < ?", (trim_before,))
                await db.execute(
                    _PUT_SNAPSHOT,
                    (taken_at, snapshot_body),
                )
                await db.execute("COMMIT")
            except BaseException:
                await self._rollback()
                raise
        except sqlite3.Error as exc:
            raise JournalError(f"cannot write journal {self.path}: {exc}") from exc
        for fid, node, resource in new_series:
            self._ids_by_key[(node, _RESOURCES[resource])] = fid
        self._next_id = next_id
        if lookup is not self._lookup:
            self._set_file_ids(file_ids, lookup)

    def _map_new(
        self, keys: list[tuple[str, Resource]]
    ) -> tuple[list[int], list[tuple[int, str, str]], int]:
        """File ids for every store series; the rows of series the file does not hold yet."""
        if len(keys) <= len(self._file_ids):
            return self._file_ids, [], self._next_id
        file_ids = list(self._file_ids)
        new_series: list[tuple[int, str, str]] = []
        next_id = self._next_id
        for key in keys[len(file_ids) :]:
            fid = self._ids_by_key.get(key)
            if fid is None:
                fid, next_id = next_id, next_id + 1
                new_series.append((fid, key[0], str(key[1])))
            file_ids.append(fid)
        return file_ids, new_series, next_id

    def _set_file_ids(self, file_ids: list[int], lookup: np.ndarray | None = None) -> None:
        self._file_ids = file_ids
        self._lookup = np.asarray(file_ids, np.int64) if lookup is None else lookup

    async def _rollback(self) -> None:
        """Undo a failed transaction; never let the ROLLBACK mask the error that caused it.

        After SQLITE_FULL or an I/O error SQLite may already have rolled the transaction
        back itself, and then ROLLBACK fails with "no transaction is active": that failure
        is ignored so that the real cause ("database or disk is full") is what gets
        reported. The ROLLBACK is always queued (aiosqlite runs statements in order), so a
        write cancelled mid-way is undone too.
        """
        with contextlib.suppress(sqlite3.Error, ValueError):  # ValueError: connection closed
            await self._conn().execute("ROLLBACK")

    async def fold_wal(self) -> None:
        """Copy committed WAL pages into the main file without waiting on anyone (PASSIVE),
        so the WAL stays about one cycle long."""
        try:
            await self._conn().execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            raise JournalError(f"cannot checkpoint journal {self.path}: {exc}") from exc

    async def write_snapshot(self, body: bytes, taken_at: float) -> None:
        """Replace the snapshot row alone (at shutdown: the whole snapshot)."""
        try:
            await self._conn().execute(_PUT_SNAPSHOT, (taken_at, body))
        except sqlite3.Error as exc:
            raise JournalError(f"cannot write journal {self.path}: {exc}") from exc

    async def checkpoint(self) -> None:
        """Fold the WAL into the main file (at shutdown)."""
        try:
            await self._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            raise JournalError(f"cannot checkpoint journal {self.path}: {exc}") from exc

    async def close(self) -> None:
        await self._close_quietly()

    async def _close_quietly(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                await self._db.close()
            self._db = None


def _samples_since(rows: list[Any], ids: np.ndarray, since: float) -> Columns:
    """The chunk rows' samples not older than ``since``, in store ids (``ids[i]`` is the file
    id of store series ``i``) and (series, time) order; ValueError if a chunk is torn."""
    fid, ts, val = codec.decode(rows)
    if fid.shape[0] == 0 or ids.shape[0] == 0:
        empty = np.empty(0, np.float64)
        return Columns(np.empty(0, np.int64), empty, empty.copy())
    # Ids are dense 0..n-1 as written; map through a lookup anyway in case of gaps, and drop
    # samples of series the file does not list (it never writes such) or of a resource this
    # version does not know. One mask, one copy: at 5,000 nodes each copy of the columns is
    # 17 MB that a fresh process must fault in.
    keep = ts >= since
    if np.array_equal(ids, np.arange(ids.shape[0])):
        sid = fid
        keep &= (fid >= 0) & (fid < ids.shape[0])
    else:
        lookup = np.full(max(int(ids.max()), int(fid.max())) + 1, -1, np.int64)
        lookup[ids] = np.arange(ids.shape[0])
        sid = lookup[np.clip(fid, 0, None)]
        keep &= (fid >= 0) & (sid >= 0)
    if not bool(keep.all()):
        sid, ts, val = sid[keep], ts[keep], val[keep]
    return codec.last_of_each(sid, ts, val)


def _is_corruption(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text or "integrity" in text
