"""A ``--db`` that is not a loadwatcher journal is left exactly as it is; a journal of ours
that fails its checks is still moved aside.

No backend: these drive ``Journal.open`` and ``identity`` directly on files made with plain
``sqlite3`` (the service's own process is driven in tests/system/test_serve_foreign_db.py).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.journal import identity
from loadwatcher.journal.identity import APPLICATION_ID, NotAJournal
from loadwatcher.journal.sqlite import Journal
from tests.support.fuzzing import examples
from tests.unit.journal.test_journal_format import (
    assert_moved_aside_and_replaced,
    cols,
    load,
    write,
)


def other_apps_db(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('keep me')")


def text_file(db: Path) -> None:
    db.write_text("[server]\nport = 8080\n# not a database\n" * 20)


def binary_file(db: Path) -> None:
    db.write_bytes(bytes(range(256)) * 8)


def marked_db(db: Path) -> None:  # another application that set its own application_id
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA application_id = {0x5F4D4F4E}")
        conn.execute("CREATE TABLE t (x)")


def meta_without_schema(db: Path) -> None:  # a `meta` table, but not ours
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE meta (key TEXT, value TEXT)")
        conn.execute("INSERT INTO meta VALUES ('owner', 'someone else')")


@pytest.mark.parametrize(
    ("make", "looks"),
    [
        (text_file, "is a text file"),
        (binary_file, "is a binary file"),
        (other_apps_db, "an SQLite database of another application (tables: notes)"),
        (marked_db, "another application (application_id 0x5f4d4f4e)"),
        (meta_without_schema, "another application (tables: meta)"),
    ],
)
async def test_a_file_that_is_not_a_journal_is_left_untouched(
    tmp_path: Path, make, looks: str
) -> None:
    db = tmp_path / "lw.db"
    make(db)
    before = sorted(p.name for p in tmp_path.iterdir()), db.read_bytes()
    journal = Journal(str(db))
    with pytest.raises(NotAJournal) as caught:
        await journal.open()
    assert not journal.is_open
    message = str(caught.value)
    assert message.startswith(f"{db} is ") and looks in message and "\n" not in message
    # Byte for byte, no file moved aside, no lock, -wal or -shm beside it.
    assert (sorted(p.name for p in tmp_path.iterdir()), db.read_bytes()) == before


async def test_an_empty_file_and_a_database_without_tables_become_journals(tmp_path: Path) -> None:
    empty, bare = tmp_path / "empty.db", tmp_path / "bare.db"
    empty.touch()
    sqlite3.connect(bare).execute("PRAGMA user_version = 0").connection.close()
    for db in (empty, bare):
        assert identity.foreign(str(db)) is None
        await write(db, (cols([0, 1], [10, 10], [1, 2]), 0))
        assert (await load(db, 0)).ts.tolist() == [10.0, 10.0]
        assert identity.application_id(db.read_bytes()[:100]) == APPLICATION_ID
        assert not list(tmp_path.glob("*.corrupt-*"))


async def test_a_journal_of_an_earlier_release_is_kept_and_marked(tmp_path: Path) -> None:
    """Journals written before the mark carry application_id 0 but the schema row."""
    db = tmp_path / "lw.db"
    await write(db, (cols([0], [10], [1]), 0))
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA application_id = 0")
    assert identity.foreign(str(db)) is None
    assert (await load(db, 0)).ts.tolist() == [10.0]  # restored, not moved aside
    assert identity.application_id(db.read_bytes()[:100]) == APPLICATION_ID
    assert not list(tmp_path.glob("*.corrupt-*"))


async def test_a_damaged_journal_of_ours_is_still_moved_aside(tmp_path: Path) -> None:
    """Damage past the header: the mark still says it is ours, so it is replaced."""
    db = tmp_path / "lw.db"
    await write(db, (cols([0, 1], [10, 10], [1, 2]), 0))
    size = db.stat().st_size
    with db.open("r+b") as f:  # every page after the first: the tables' b-trees
        f.seek(65536)
        f.write(b"\xa5" * (size - 65536))
    assert identity.foreign(str(db)) is None
    await assert_moved_aside_and_replaced(db, "")


async def test_a_journal_of_ours_without_its_meta_row_is_moved_aside(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    await write(db, (cols([0], [10], [1]), 0))
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM meta WHERE key = 'schema'")
    await assert_moved_aside_and_replaced(db, "no schema version")


def _wal_writer(db: Path) -> sqlite3.Connection:
    """Another process's connection in WAL mode that never checkpoints on its own: what
    it writes stays in the WAL until it says so."""
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    return writer


async def test_another_apps_tables_still_in_its_wal_are_refused(tmp_path: Path) -> None:
    """Tables still in a WAL are not in the main file: the check reads through the WAL
    (under SQLite's locks, as its writer does) and refuses them, leaving the file as it was."""
    db = tmp_path / "lw.db"
    writer = _wal_writer(db)
    try:
        writer.execute("CREATE TABLE notes (body TEXT)")
        main_before = db.read_bytes()
        journal = Journal(str(db))
        with pytest.raises(NotAJournal, match="another application"):
            await journal.open()
        assert not journal.is_open
        assert db.read_bytes() == main_before
        assert not list(tmp_path.glob("*.corrupt-*")) and not list(tmp_path.glob("*.lock"))
        assert writer.execute("SELECT count(*) FROM notes").fetchone() == (0,)
    finally:
        writer.close()


def test_a_journal_whose_mark_is_still_in_its_wal_is_ours(tmp_path: Path) -> None:
    """A journal another process has just made (a rolling update's old instance) may hold
    its first page, with the mark, in its WAL while the main file already has other tables:
    it is ours, so the opener meets the lock ("in use by another process"), not a refusal."""
    db = tmp_path / "lw.db"
    writer = _wal_writer(db)
    try:
        writer.execute("CREATE TABLE chunks (id INTEGER PRIMARY KEY)")
        writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the main file has chunks only
        writer.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        writer.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        writer.execute("INSERT INTO meta VALUES ('schema', '1')")
        assert identity.application_id(db.read_bytes()[:100]) == 0  # not copied over yet
        assert identity.foreign(str(db)) is None
    finally:
        writer.close()


@given(st.binary(max_size=200))
def test_any_bytes_that_are_not_an_sqlite_header_are_foreign_or_empty(data: bytes) -> None:
    """Whatever a file starts with, the description is one line and never a traceback."""
    app_id = identity.application_id(data)
    assert app_id is None or data.startswith(b"SQLite format 3\x00")
    kind = identity._kind(data)
    assert kind in ("a text file", "a binary file")


@settings(max_examples=examples(60), deadline=None)
@given(data=st.binary(min_size=1, max_size=300), sqlite_magic=st.booleans())
def test_any_file_that_is_not_ours_is_refused_byte_for_byte(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, sqlite_magic: bool
) -> None:
    """A hostile or careless file of any bytes (an SQLite magic included, with whatever
    follows): never moved aside, never changed, no traceback, nothing left beside it."""
    where = tmp_path_factory.mktemp("any")
    db = where / "lw.db"
    body = (b"SQLite format 3\x00" + data) if sqlite_magic else data
    if identity.application_id(body[:100]) == APPLICATION_ID:
        return  # ours by its mark: a damaged journal, moved aside (tested above)
    db.write_bytes(body)
    journal = Journal(str(db))

    async def attempt() -> None:
        try:
            await journal.open()
        except NotAJournal:
            return
        finally:
            await journal.close()
        raise AssertionError("opened")

    asyncio.run(attempt())
    assert db.read_bytes() == body
    assert [p.name for p in where.iterdir()] == ["lw.db"]


async def test_a_directory_at_the_path_is_refused_not_replaced(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    db.mkdir()
    (db / "keep").write_text("x")
    journal = Journal(str(db))
    with pytest.raises(NotAJournal, match="is a directory"):
        await journal.open()
    assert [p.name for p in db.iterdir()] == ["keep"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lw.db"]


async def test_an_unmarked_unreadable_database_is_left_alone(tmp_path: Path) -> None:
    """Without the mark, a damaged SQLite file may be anyone's: refused, not moved."""
    db = tmp_path / "lw.db"
    body = b"SQLite format 3\x00" + b"\x10\x00\x01\x01" + b"\x00" * 80 + b"\xa5" * 4000
    db.write_bytes(body)
    journal = Journal(str(db))
    with pytest.raises(NotAJournal, match="cannot be read"):
        await journal.open()
    assert db.read_bytes() == body and [p.name for p in tmp_path.iterdir()] == ["lw.db"]
