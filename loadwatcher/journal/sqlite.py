"""The SQLite journal: raw samples and the last snapshot, so a restart serves at once.

The snapshot row normally holds the snapshot without its windows (see
``pipeline/snapshot.py``): they are rebuilt from the samples of the same transaction.

One process at a time: ``open`` takes an exclusive lock on ``<name>.lock`` (``lock``) and
``close`` releases it; a second process is refused, naming the holder's PID. WAL mode, one
connection (one writer), one transaction per cycle. ``synchronous=NORMAL``
is enough: in WAL mode a killed process never loses a committed transaction (only a power
loss can lose the last ones), and the file is never corrupted.

The store-id -> file-id map is ``fileids.FileIds``.

Each sample chunk carries a checksum. A read leaves out chunks whose checksum or shape is
wrong and samples no fresh fetch would keep (``codec.plausible``), and tells ``on_refused``
what it left out, so that health can say so. It also cleans the file of them: a damaged
row is deleted, a row with implausible samples rewritten in place with its sound ones, so
that a sample written ahead of the clock does not come back as a real one once the clock
has caught up with it.

Series the store forgets (no sample in the retention: node churn) leave the file with the
next write (``forget``).

A failed write (disk full, read-only, I/O error) leaves the connection usable: the next
write simply tries again, and the engine hands it the samples of the failed ones.

The file is created owner-only (0600). A journal of ours that fails its integrity check
or carries another schema version is moved aside (``<name>.corrupt-<unix time>``) and a
new one started: the service must not crash-loop on it, and the bad file is kept for
inspection. A file that is not a journal of ours (``identity``: a text file, another
application's database) is never touched: ``open`` raises ``identity.NotAJournal`` before
it takes the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiosqlite
import numpy as np

from loadwatcher.errors import JournalError
from loadwatcher.journal import codec, fileids, identity, lock, schema
from loadwatcher.model import Columns, Resource

_RESOURCES = {str(r): r for r in Resource}
# Chunk rows read at a time at start (each at most codec.ROW_SAMPLES samples, 1.5 MB).
READ_ROWS = 8
_PUT_SNAPSHOT = "INSERT OR REPLACE INTO snapshot (id, taken_at, body) VALUES (1, ?, ?)"
_PUT_NEXT_ID = "INSERT OR REPLACE INTO meta (key, value) VALUES ('next_series_id', ?)"


@dataclass(frozen=True)
class StoredSamples:
    """Every series the file holds (index = store series id), their samples and apart their
    staleness markers, and what the read refused (damaged rows, implausible samples)."""

    keys: list[tuple[str, Resource]]
    samples: Columns
    markers: Columns
    refused: codec.Refused = field(default_factory=codec.Refused)


@dataclass(frozen=True)
class OpenReport:
    """How opening went: ``quarantined`` names the file moved aside, if any, and
    ``reason`` says why it was; ``other_source`` names the file moved aside because another
    source wrote it, and ``previous`` is that source (None: not recorded)."""

    quarantined: str | None = None
    reason: str | None = None
    other_source: str | None = None
    previous: dict[str, str] | None = None


class Journal:
    """One SQLite file; every method raises JournalError, never sqlite3 errors."""

    def __init__(self, path: str, source: Mapping[str, str] | None = None) -> None:
        self.path = path
        # What produced the samples (``providers/source.py``): a file written by another
        # source is moved aside rather than restored. None: not checked (tools, tests).
        self.source = dict(source) if source is not None else None
        self._db: aiosqlite.Connection | None = None
        self._lock: int | None = None  # the lock file's descriptor while open
        self.on_refused: Callable[[codec.Refused], None] | None = None
        self.ids = fileids.FileIds()

    @property
    def is_open(self) -> bool:
        return self._db is not None

    async def open(self) -> OpenReport:
        """Open (creating owner-only), check, and prepare the schema."""
        quarantined: str | None = None
        reason: str | None = None
        try:
            schema.make_parent(self.path)
            looks = identity.foreign(self.path)
            if looks is not None:  # before the lock: not even a lock file beside it
                raise identity.NotAJournal(f"{self.path} is {looks}; left as it is")
            self._lock = lock.acquire(self.path)
            try:
                await self._connect_and_check()
            except sqlite3.DatabaseError as exc:
                await self._close_db()  # the lock stays: the file is still ours to replace
                if not schema.must_move_aside(exc):
                    raise JournalError(f"cannot open journal {self.path}: {exc}") from exc
                quarantined, reason = schema.quarantine(self.path, exc), str(exc)
                try:
                    await self._connect_and_check()
                except sqlite3.Error as exc2:
                    raise JournalError(f"cannot create journal {self.path}: {exc2}") from exc2
            moved, previous = await self._claim()
            await self._read_series()
        except JournalError:
            await self._close_quietly()
            raise
        except OSError as exc:  # also from the quarantine's rename (read-only directory)
            await self._close_quietly()
            why = exc.strerror or str(exc)
            raise JournalError(f"cannot open journal {self.path}: {why}") from exc
        except sqlite3.Error as exc:
            await self._close_quietly()
            raise JournalError(f"cannot read journal {self.path}: {exc}") from exc
        return OpenReport(quarantined, reason, moved, previous)

    async def _claim(self) -> tuple[str | None, dict[str, str] | None]:
        """Record this journal's source; a file another source wrote (or an earlier
        release, without a record, that holds data) is moved aside and a new one started.
        Returns the moved file's path and the source recorded in it."""
        if self.source is None:
            return None, None
        recorded = await self._meta("source")
        previous = _parse_source(recorded)
        if previous == self.source:
            return None, None
        if recorded is not None or await self._holds_data():
            await self._close_db()  # the lock stays: the file is still ours to replace
            moved = schema.move_aside(self.path, "other-source")
            try:
                await self._connect_and_check()
            except sqlite3.Error as exc:
                raise JournalError(f"cannot create journal {self.path}: {exc}") from exc
        else:
            moved = None
        text = json.dumps(self.source, sort_keys=True)
        await self._conn().execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('source', ?)", (text,)
        )
        return moved, previous

    async def _meta(self, key: str) -> str | None:
        async with self._conn().execute("SELECT value FROM meta WHERE key = ?", (key,)) as cur:
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def _holds_data(self) -> bool:
        db = self._conn()
        for table in ("series", "chunks", "snapshot"):
            async with db.execute(f"SELECT 1 FROM {table} LIMIT 1") as cur:
                if await cur.fetchone() is not None:
                    return True
        return False

    async def _read_series(self) -> None:
        # One query a resource (series of a resource this version does not know are left
        # alone), and one string a node whatever its resources: these keys become the
        # store's at restore, and the rows' own strings would only be heap left in holes.
        names: dict[str, str] = {}
        series: list[tuple[int, str, Resource]] = []
        for text, resource in _RESOURCES.items():
            async with self._conn().execute(
                "SELECT id, node FROM series WHERE resource = ?", (text,)
            ) as cur:
                series += [
                    (int(fid), names.setdefault(node, str(node)), resource)
                    for fid, node in await cur.fetchall()
                ]
        saved = await self._meta("next_series_id")
        series.sort(key=lambda s: s[0])
        self.ids.read(series, int(saved) if saved is not None and saved.isdigit() else 0)

    async def _connect_and_check(self) -> None:
        self._db = await schema.connect(self.path)
        await schema.check(self._db, self.path)

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

    async def load_samples(self, since: float, until: float = np.inf) -> StoredSamples:
        """Every series and the plausible samples from ``since`` to ``until``, time-ordered
        per series; damaged rows are left out and counted."""
        db = self._conn()
        reader = codec.Reader(since, until)
        suspect: list[Any] = []  # the rows the clean-up deletes or rewrites
        try:
            async with db.execute(
                "SELECT id, sid, ts, val, crc FROM chunks WHERE ts_max >= ? ORDER BY id",
                (since,),
            ) as cur:
                # A few rows at a time, each batch decoded off the event loop (which may
                # already serve the snapshot restored before the samples).
                while batch := list(await cur.fetchmany(READ_ROWS)):
                    flags = await asyncio.to_thread(reader.add, [row[1:] for row in batch])
                    suspect += [row for row, bad in zip(batch, flags, strict=True) if bad]
                    del batch
        except sqlite3.Error as exc:
            raise JournalError(f"cannot read samples from {self.path}: {exc}") from exc
        # The series ``open`` read, in file id order (not read again: a second copy of
        # every key would sit beside the first until the store took one).
        keys, ids = self.ids.held()
        self.ids.loaded(keys, ids)  # store id i <-> file id ids[i]
        samples, markers = await asyncio.to_thread(reader.samples_and_markers, ids)
        refused = reader.refused
        if self.on_refused is not None:
            self.on_refused(refused)
        if suspect:
            await self._clean(suspect, until)
        return StoredSamples(keys, samples, markers, refused)

    async def _clean(self, rows: list[Any], until: float) -> None:
        """Delete the damaged rows and rewrite in place those holding implausible samples
        beside sound ones. A failure leaves the file as it was: the reads filter anyway."""
        gone, rewritten = await asyncio.to_thread(codec.scrub, rows, until)
        if not gone and not rewritten:
            return
        db = self._conn()
        try:
            await db.execute("BEGIN IMMEDIATE")
            try:
                await db.executemany("DELETE FROM chunks WHERE id = ?", [(i,) for i in gone])
                await db.executemany(codec.UPDATE, rewritten)
                await db.execute("COMMIT")
            except BaseException:
                await self._rollback()
                raise
        except sqlite3.Error as exc:
            raise JournalError(f"cannot clean journal {self.path}: {exc}") from exc

    def forget(self, renumber: np.ndarray) -> None:
        """The store forgot the series whose ``renumber`` entry is -1 and numbered the
        others afresh (entry = new store id): follow it, and delete the forgotten series
        from the file with the next write."""
        self.ids.forget(renumber)

    async def write_cycle(
        self,
        keys: list[tuple[str, Resource]],
        added: Columns,
        trim_before: float,
        snapshot_body: bytes,
        taken_at: float,
    ) -> None:
        """One transaction: new series, a chunk of new samples, retention trim, the snapshot
        row.

        ``keys`` are the store's series (index = store id) and ``added.sid`` store ids.
        Nothing is remembered of a write that fails: the next one retries the new series.
        """
        db = self._conn()
        self.ids.share(keys)
        plan = self.ids.plan(keys)
        new_series = [(fid, key[0], str(key[1])) for key, fid in plan.fresh]
        sid = plan.file_ids[added.sid] if len(added) else added.sid
        doomed = [(fid,) for fid in self.ids.doomed]
        try:
            await db.execute("BEGIN IMMEDIATE")
            try:
                if doomed:  # first: a forgotten node may come back in this very write
                    await db.executemany("DELETE FROM series WHERE id = ?", doomed)
                    await db.execute(_PUT_NEXT_ID, (str(plan.next_id),))
                if new_series:
                    await db.executemany(
                        "INSERT OR IGNORE INTO series (id, node, resource) VALUES (?, ?, ?)",
                        new_series,
                    )
                if len(added):
                    # Encoded row by row as SQLite reads them, in its thread.
                    await db.executemany(codec.INSERT, codec.encode_rows(sid, added.ts, added.val))
                await db.execute("DELETE FROM chunks WHERE ts_max < ?", (trim_before,))
                await db.execute(_PUT_SNAPSHOT, (taken_at, snapshot_body))
                await db.execute("COMMIT")
            except BaseException:
                await self._rollback()
                raise
        except sqlite3.Error as exc:
            raise JournalError(f"cannot write journal {self.path}: {exc}") from exc
        self.ids.written(plan, len(doomed))

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
        """Replace the snapshot row alone (at a clean stop: the whole snapshot)."""
        try:
            await self._conn().execute(_PUT_SNAPSHOT, (taken_at, body))
        except sqlite3.Error as exc:
            raise JournalError(f"cannot write journal {self.path}: {exc}") from exc

    async def truncate_wal(self) -> None:
        """Fold the whole WAL into the main file and empty it (at a clean stop)."""
        try:
            await self._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            raise JournalError(f"cannot checkpoint journal {self.path}: {exc}") from exc

    async def close(self) -> None:
        await self._close_quietly()

    async def _close_db(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                await self._db.close()
            self._db = None

    async def _close_quietly(self) -> None:
        await self._close_db()
        if self._lock is not None:  # after the connection: no write outlives the lock
            lock.release(self._lock)
            self._lock = None


def _parse_source(text: str | None) -> dict[str, str] | None:
    """A recorded source; an unreadable record is nobody's (never equal to ours)."""
    if text is None:
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return {"unreadable": text[:80]}
    if not isinstance(parsed, dict):
        return {"unreadable": text[:80]}
    return {str(k): str(v) for k, v in parsed.items()}
