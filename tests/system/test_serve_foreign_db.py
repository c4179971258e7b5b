"""The real ``serve`` process on a ``--db`` that is not a loadwatcher journal: the start is
refused with one line and exit 2, and the file is left byte for byte as it was; a damaged
journal of ours is still moved aside and the service starts."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from loadwatcher.journal.identity import APPLICATION_ID
from tests.support.backends import free_port
from tests.support.faults import Service


def _text(db: Path) -> str:
    db.write_text("user=alice\npassword=hunter2\n" * 10)
    return "is a text file, not a loadwatcher journal (no SQLite header)"


def _other_app(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE bookmarks (url TEXT)")
        conn.execute("INSERT INTO bookmarks VALUES ('https://example.org')")
    return "is an SQLite database of another application (tables: bookmarks)"


@pytest.mark.parametrize("make", [_text, _other_app])
def test_serve_refuses_a_file_that_is_not_a_journal_and_leaves_it(tmp_path: Path, make) -> None:
    db = tmp_path / "data" / "app.db"
    db.parent.mkdir()
    looks = make(db)
    before = db.read_bytes()
    service = Service.prometheus(f"http://127.0.0.1:{free_port()}", db, tmp_path / "lw.log")
    service.start()
    assert service.proc is not None
    try:
        code = service.proc.wait(30)
    finally:
        service.kill()  # a service that did not refuse must not outlive the test
    assert code == 2, service.log_tail()
    lines = [line for line in service.log_text().splitlines() if not line.startswith("====")]
    assert lines == [
        f"loadwatcher: bad configuration: journal.path: {db} {looks}; left as it is "
        "(name a journal or a new file)"
    ], service.log_tail()
    assert "hunter2" not in service.log_text()
    assert db.read_bytes() == before
    assert sorted(p.name for p in db.parent.iterdir()) == ["app.db"]  # no lock, -wal, .corrupt


def test_serve_moves_a_damaged_journal_of_ours_aside_and_starts(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    body = db.read_bytes()[:100] + b"\xa5" * 4000
    db.write_bytes(body)
    service = Service.prometheus(f"http://127.0.0.1:{free_port()}", db, tmp_path / "lw.log")
    try:
        service.start().wait_status("/healthz", 200)  # no backend: live, never ready
        service.wait_until(
            "the journal moved aside", lambda: service.health()[1]["journal"]["quarantined"]
        )
        _, health = service.health()
        moved = health["journal"]["quarantined"]
        assert moved and Path(moved).read_bytes() == body, health
        assert health["journal"]["ok"], health
    finally:
        service.terminate()


def test_serve_takes_an_empty_file_as_a_new_journal(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    db.touch()
    service = Service.prometheus(f"http://127.0.0.1:{free_port()}", db, tmp_path / "lw.log")
    try:
        service.start().wait_status("/healthz", 200)
        service.wait_until("the journal created", lambda: (tmp_path / "lw.db.lock").exists())
        _, health = service.health()
        assert health["journal"]["quarantined"] is None, health
    finally:
        assert service.terminate()[0] == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() is not None
    assert not list(tmp_path.glob("*.corrupt-*"))
