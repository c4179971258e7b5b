"""The journal's lock file: removed on a clean release, never someone else's.

flock locks belong to an open file description, so two acquisitions in one process
conflict as two processes do: these tests stand for two services on one ``--db``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loadwatcher.journal import lock


def test_a_clean_release_removes_the_lock_file(tmp_path: Path) -> None:
    db = str(tmp_path / "lw.db")
    held = lock.acquire(db)
    assert Path(lock.lock_path(db)).read_text().strip() == str(os.getpid())
    with pytest.raises(lock.JournalLocked, match=f"PID {os.getpid()}"):
        lock.acquire(db)  # a second taker is refused while the first holds it
    assert Path(lock.lock_path(db)).exists()  # and the refusal removed nothing
    lock.release(held)
    assert not Path(lock.lock_path(db)).exists()
    again = lock.acquire(db)  # and the next taker gets it
    lock.release(again)
    assert list(tmp_path.iterdir()) == []


def test_a_release_never_removes_a_newer_holders_file(tmp_path: Path) -> None:
    db = str(tmp_path / "lw.db")
    first = lock.acquire(db)
    os.unlink(lock.lock_path(db))  # an operator cleaning up, a restore of the directory
    second = lock.acquire(db)  # a new file at the path: a second holder, as it must be
    lock.release(first)
    assert Path(lock.lock_path(db)).exists()  # the second holder's file stays
    with pytest.raises(lock.JournalLocked):
        lock.acquire(db)
    lock.release(second)
    assert not Path(lock.lock_path(db)).exists()


def test_a_taker_that_locked_a_removed_file_takes_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race of a removal: the taker opened the old file, the holder removed it and
    released; the taker's flock then succeeds on a file no longer at the path."""
    db = str(tmp_path / "lw.db")
    holder = lock.acquire(db)
    real_open = os.open
    raced: list[int] = []

    def open_then_release(path: str, flags: int, mode: int = 0o777) -> int:
        fd = real_open(path, flags, mode)
        if not raced:
            raced.append(fd)
            lock.release(holder)  # between the taker's open and its flock
        return fd

    monkeypatch.setattr(os, "open", open_then_release)
    taken = lock.acquire(db)
    monkeypatch.undo()
    assert raced and os.fstat(taken).st_ino == os.stat(lock.lock_path(db)).st_ino
    with pytest.raises(lock.JournalLocked):
        lock.acquire(db)
    lock.release(taken)
    assert not Path(lock.lock_path(db)).exists()
