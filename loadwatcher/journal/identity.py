"""Whether an existing file is a loadwatcher journal, told without changing it.

A ``--db`` with a typo can name another application's SQLite file or a text file: such a
file must be left exactly as it is (not moved aside, no lock file beside it), and the start
refused. Every journal carries ``APPLICATION_ID`` in its SQLite header (``PRAGMA
application_id``), so a journal of ours whose pages are damaged is still recognised by its
first 100 bytes and moved aside as before. A file without the mark is ours only when it
holds the journal's ``meta`` row ``schema`` (journals of releases before the mark); an
empty file, or an SQLite file without any table, is used as a new journal.
"""

from __future__ import annotations

import codecs
import os
import sqlite3
import urllib.parse

from loadwatcher.errors import ConfigError, JournalError

# "LWJ1" in ASCII: the header's application_id of every journal this service writes.
APPLICATION_ID = 0x4C574A31

_MAGIC = b"SQLite format 3\x00"
_HEADER = 100
_APP_ID_AT = 68


class NotAJournal(JournalError):
    """The file exists and is not a loadwatcher journal: it is left as it is."""


def refuse_foreign(path: str) -> None:
    """ConfigError (``journal.path``) when ``path`` exists and is not a loadwatcher journal:
    ``serve`` and ``config check`` refuse it alike, before anything else touches it."""
    looks = foreign(path) if path else None
    if looks is not None:
        raise ConfigError(
            "journal.path", f"{path} is {looks}; left as it is (name a journal or a new file)"
        )


def application_id(header: bytes) -> int | None:
    """The application_id of an SQLite header, None when ``header`` is not one (pure)."""
    if len(header) < _HEADER or not header.startswith(_MAGIC):
        return None
    return int.from_bytes(header[_APP_ID_AT : _APP_ID_AT + 4], "big")


def foreign(path: str) -> str | None:
    """What ``path`` looks like when it exists and is not a loadwatcher journal; None when
    it is one (sound or damaged), is missing or empty, or is an SQLite file without tables."""
    try:
        with open(path, "rb") as f:
            header = f.read(_HEADER)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return "a directory, not a loadwatcher journal"
    except OSError:
        return None  # unreadable: opening the journal reports it as a journal error
    if not header:
        return None
    app_id = application_id(header)
    if app_id is None:
        return f"{_kind(header)}, not a loadwatcher journal (no SQLite header)"
    if app_id == APPLICATION_ID:
        return None
    if app_id != 0:
        return f"an SQLite database of another application (application_id {app_id:#010x})"
    return _unmarked(path)


def _unmarked(path: str) -> str | None:
    """An SQLite file without our mark: ours only with the journal's schema row."""
    # immutable: no lock, no -shm or -wal created beside someone else's file. Not when a
    # WAL lies beside it: its writer may not have copied the first page (with our mark)
    # into the file yet, nor finished copying others, and only a read through the WAL,
    # under SQLite's locks, sees the file as it is (a journal another process just made).
    wal = os.path.exists(path + "-wal")
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    uri += "" if wal else "&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        return f"an SQLite database that cannot be read ({exc})"
    try:
        tables = [
            str(row[0])
            for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        if not tables:
            return None
        if "meta" in tables:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if row is not None:
                return None
    except sqlite3.Error as exc:
        return f"an SQLite database that cannot be read ({exc})"
    finally:
        conn.close()
    shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
    return f"an SQLite database of another application (tables: {shown})"


def _kind(header: bytes) -> str:
    """A word for a file that is not SQLite, from its first bytes (pure)."""
    try:
        # Not final: the 100 bytes may end inside a character.
        text = codecs.getincrementaldecoder("utf-8")().decode(header, final=False)
    except UnicodeDecodeError:
        return "a binary file"
    printable = all(ch.isprintable() or ch in "\r\n\t" for ch in text)
    return "a text file" if printable else "a binary file"
