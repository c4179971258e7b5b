"""One writer per journal: an exclusive ``flock`` on ``<journal>.lock``, held while open.

SQLite's own locks last one transaction, so two processes on one file would interleave
their cycles and number series each their own way. The lock lives in a file beside the
journal (not on the journal itself) so it never meets SQLite's locking, survives the
journal being moved aside, and is released by the kernel however the holder ends (kill -9
included): a PID left in the file by a dead process is only a label, never a lock.

A clean release removes the file, so that a stopped service leaves nothing behind. The
removal happens while the lock is still held, and a taker checks, once it holds the lock,
that the file it locked is still the one at the path: one that locked a file just removed
tries again, so two holders never lock two different files of one name.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from loadwatcher.errors import JournalError

# A taker loses the race above only when a holder removes the file between the taker's
# open and its flock; more than a few times in a row means something else is at work.
_ATTEMPTS = 8


class JournalLocked(JournalError):
    """Another process holds the journal."""


class Held(int):
    """The locked lock file's descriptor (an ``int``), and the path it was locked at."""

    path: str

    def __new__(cls, fd: int, path: str) -> Held:
        held = super().__new__(cls, fd)
        held.path = path
        return held


def lock_path(path: str) -> str:
    return path + ".lock"


def acquire(path: str) -> int:
    """The open, locked lock file of journal ``path`` (our PID written in it); raises
    ``JournalLocked`` naming the holder when another process has it, OSError otherwise."""
    where = lock_path(path)
    for _ in range(_ATTEMPTS):
        fd = os.open(where, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise JournalLocked(
                f"journal {path} is in use by another process ({holder}, lock {where})"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, where):
            break
        os.close(fd)  # locked a file its holder removed on release: take the new one
    else:
        raise JournalError(f"journal {path}: its lock file {where} keeps being replaced")
    with contextlib.suppress(OSError):  # the PID is a label for people; the lock is the flock
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return Held(fd, where)


def release(fd: int) -> None:
    """Remove the lock file (when it is still ours) and release the lock."""
    if isinstance(fd, Held) and _same_file(fd, fd.path):
        with contextlib.suppress(OSError):  # a read-only directory: the file stays, harmless
            os.unlink(fd.path)
    with contextlib.suppress(OSError):
        os.close(fd)  # closing the only descriptor releases the flock


def _same_file(fd: int, path: str) -> bool:
    try:
        held, named = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def _holder(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        if text.isdigit():
            return f"PID {int(text)}"
    return "PID unknown"
