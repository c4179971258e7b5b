"""The journal file's tables, and the checks a file passes before it is used.

A file is used when it is new (no tables: the tables are created in one transaction) or
holds this schema version and passes ``PRAGMA quick_check``. A journal of ours that fails
raises ``sqlite3.DatabaseError`` and ``Journal.open`` moves it aside (``quarantine``); a
file that is not ours (``identity``) raises ``identity.NotAJournal`` and is left alone.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import aiosqlite

from loadwatcher.journal import identity

SCHEMA_VERSION = 3
CACHE_KIB = 256  # SQLite's page cache per connection

# Samples are written as one row per cycle ("chunk"): three little-endian arrays (file
# series id, time, value), one INSERT however many samples, where a row per sample made the
# write grow with the cluster. Retention drops whole chunks once their newest sample is too
# old, and reads filter by time. ``crc`` is the CRC32 of the three arrays: a row whose bytes
# changed (a bad sector, a stray write) still passes ``quick_check``, which sees only the
# b-tree, and must not be served.
_TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE series (
    id INTEGER PRIMARY KEY, node TEXT NOT NULL, resource TEXT NOT NULL,
    UNIQUE (node, resource));
CREATE TABLE chunks (
    id INTEGER PRIMARY KEY, ts_min REAL NOT NULL, ts_max REAL NOT NULL, n INTEGER NOT NULL,
    sid BLOB NOT NULL, ts BLOB NOT NULL, val BLOB NOT NULL, crc INTEGER NOT NULL);
CREATE INDEX chunks_ts_max ON chunks (ts_max);
CREATE TABLE snapshot (
    id INTEGER PRIMARY KEY CHECK (id = 1), taken_at REAL NOT NULL, body BLOB NOT NULL);
"""


def make_parent(path: str) -> None:
    """The journal's directory, created owner-only if missing."""
    where = Path(path)
    if where.parent != Path("") and not where.parent.exists():
        where.parent.mkdir(parents=True, mode=0o700, exist_ok=True)


async def connect(path: str) -> aiosqlite.Connection:
    """A connection to ``path``, created owner-only (its directory too) if missing."""
    make_parent(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    db = await aiosqlite.connect(path, isolation_level=None)
    try:
        # Large pages for a file of large blobs (a cycle's chunk, the snapshot): fewer
        # overflow pages and WAL frames to write and fold. It only applies to a new file
        # (before the first table and before WAL mode).
        await db.execute("PRAGMA page_size=65536")
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.execute("PRAGMA busy_timeout=2000")
        # A small page cache: a cycle appends one chunk and rewrites the snapshot, and a
        # restore reads the chunks once, so SQLite's default 2 MB cache of 64 KiB pages
        # only held memory (steady RSS 1 MB lower at 5,000 nodes, the cycle's CPU as before).
        await db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        # No checkpoint inside a cycle's commit, where it would add the fold to the write:
        # the engine calls ``fold_wal`` after the cycle, in the idle time before the next
        # poll.
        await db.execute("PRAGMA wal_autocheckpoint=0")
    except BaseException:
        await db.close()
        raise
    return db


async def check(db: aiosqlite.Connection, path: str) -> None:
    """Check the file, switch it to WAL mode and create the tables of a new one; raises
    ``sqlite3.DatabaseError`` for a journal of ours that must be moved aside and
    ``identity.NotAJournal`` for a file that is not ours."""
    # Read before anything else: ``Journal.open`` looked at the header already, but a file
    # whose tables were still in its WAL looked empty then.
    async with db.execute("PRAGMA application_id") as cur:
        row = await cur.fetchone()
    marked = row is not None and int(row[0]) == identity.APPLICATION_ID
    if row is not None and int(row[0]) not in (0, identity.APPLICATION_ID):
        raise identity.NotAJournal(f"{path} is an SQLite database of another application")
    # quick_check is the cheap form of integrity_check: it skips index cross-checks.
    async with db.execute("PRAGMA quick_check") as cur:
        row = await cur.fetchone()
    if row is None or row[0] != "ok":
        raise sqlite3.DatabaseError(f"integrity check failed: {_first_problem(row)}")
    # The version is read before anything is written (WAL mode included), so that a file
    # of another layout is moved aside as it was.
    try:
        version = await _version(db)
    except sqlite3.DatabaseError as exc:
        if marked:
            raise
        raise identity.NotAJournal(f"{path} is {exc}") from exc
    if version is not None and version != str(SCHEMA_VERSION):
        # No version was ever released with another schema, so there is nothing to convert.
        if version.isdigit() and int(version) > SCHEMA_VERSION:
            raise NewerJournal(
                f"written by a newer loadwatcher: journal schema {version}, this one reads "
                f"{SCHEMA_VERSION}"
            )
        raise sqlite3.DatabaseError(f"unknown journal schema version {version}")
    async with db.execute("PRAGMA journal_mode=WAL") as cur:
        await cur.fetchall()  # finished, or the COMMIT below finds it still in progress
    if version is None:
        # One transaction: a file with tables but no version is never one of ours.
        await db.executescript(
            f"BEGIN IMMEDIATE; PRAGMA application_id = {identity.APPLICATION_ID}; {_TABLES} "
            f"INSERT INTO meta VALUES ('schema', '{SCHEMA_VERSION}'); COMMIT;"
        )
    elif not marked:  # a journal of a release before the mark
        await db.execute(f"PRAGMA application_id = {identity.APPLICATION_ID}")


async def _version(db: aiosqlite.Connection) -> str | None:
    """``meta.schema`` of the file; None for a file without tables (a new one)."""
    async with db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'") as cur:
        row = await cur.fetchone()
    if row is None or row[0] == 0:
        return None
    try:
        async with db.execute("SELECT value FROM meta WHERE key = 'schema'") as cur:
            row = await cur.fetchone()
    except sqlite3.OperationalError as exc:  # no meta table, or not ours
        raise sqlite3.DatabaseError(f"not a loadwatcher journal ({exc})") from exc
    if row is None:
        raise sqlite3.DatabaseError("not a loadwatcher journal (no schema version)")
    return str(row[0])


def must_move_aside(exc: sqlite3.DatabaseError) -> bool:
    """Whether opening failed on the file itself (rather than on its disk or directory)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return True
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text or "integrity" in text


class NewerJournal(sqlite3.DatabaseError):
    """A journal of a later schema: a rollback to this version after an upgrade."""


def quarantine(path: str, exc: sqlite3.DatabaseError) -> str:
    """Move the file, with its -wal and -shm, to ``<path>.corrupt-<unix time>``, or to
    ``<path>.newer-<unix time>`` for a newer version's journal (it is not damaged)."""
    return move_aside(path, "newer" if isinstance(exc, NewerJournal) else "corrupt")


def move_aside(path: str, why: str) -> str:
    """Move the file, with its -wal and -shm, to ``<path>.<why>-<unix time>`` (``-<n>``
    added when a file moved aside in the same second holds that name)."""
    stem = target = f"{path}.{why}-{int(time.time())}"
    n = 0
    while any(os.path.lexists(target + suffix) for suffix in ("", "-wal", "-shm")):
        n += 1
        target = f"{stem}-{n}"
    # The WAL first: stopped half-way, the old file stays at the path without its WAL (and
    # is judged again at the next start), never a new file beside the old one's WAL, which
    # SQLite would replay into it.
    for suffix in ("-wal", "-shm", ""):
        if os.path.exists(path + suffix):
            os.replace(path + suffix, target + suffix)
    return target


def _first_problem(row: Any) -> str:
    """The first problem quick_check reports (its report can run to many lines)."""
    lines = [line for line in str(row[0] if row else "").splitlines() if line]
    problems = [line for line in lines if not line.startswith("*** in database")]
    return problems[0] if problems else "?"
