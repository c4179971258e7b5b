"""One writer per journal: an exclusive ``flock`` on ``<journal>.lock``, held while open.

SQLite's own locks last one transaction, so two processes on one file would interleave
their cycles and number series each their own way. The lock lives in a file beside the
journal (not on the journal itself) so it never meets SQLite's locking, survives the
journal being moved aside, and is released by the kernel however the holder ends (kill -9
included): a PID left in the file by a dead process is only a label, never a lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from loadwatcher.errors import JournalError


class JournalLocked(JournalError):
    """Another process holds the journal."""


def lock_path(path: str) -> str:
    return path + ".lock"


def acquire(path: str) -> int:
    """The open, locked lock file of journal ``path`` (our PID written in it); raises
    ``JournalLocked`` naming the holder when another process has it, OSError otherwise."""
    where = lock_path(path)
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
    with contextlib.suppress(OSError):  # the PID is a label for people; the lock is the flock
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def release(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)  # closing the only descriptor releases the flock


def _holder(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        if text.isdigit():
            return f"PID {int(text)}"
    return "PID unknown"
