"""Give freed heap memory back to the operating system (glibc only; elsewhere a no-op).

A cold start makes many short-lived objects; glibc keeps the freed arenas, so the resident
size would stay at the start's peak long after. ``trim`` returns them: after a start, and
after a cycle once the resident size grew more than ``KEEP_FREE_BYTES`` (``Spare``). A
steady cycle frees a few megabytes that the next one takes again, and pages given back
are faulted in anew: trimming them at every poll cost a small cluster's poll more CPU than
those megabytes are worth. From about 5,000 nodes a steady cycle frees more than
``KEEP_FREE_BYTES`` and every poll trims; there the faults cost no CPU that stands out of
the spread between runs, and the trim keeps the resident size lower (both measured in
benchmarks/RESULTS.md).

``configure`` (at start, before any thread) also keeps the cycle's large numpy buffers out
of glibc's heaps: by default its mmap threshold rises to the largest block freed, so
multi-megabyte arrays land in the heap and fragment it, and every worker thread gets an
arena of its own. A fixed 1 MiB threshold and one arena keep the resident size near the
live data: the workers (parsing, SQLite) take turns at the interpreter lock anyway, so
they hardly wait for the arena's, and a second arena only added its own free space (peak
RSS over a cold start at 5,000 nodes 127 -> 122 MB, steady 1 MB lower, CPU per poll within
noise; benchmarks/RESULTS.md has the figures).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable
from functools import cache

# mallopt(3) parameters (glibc's malloc.h).
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
MMAP_THRESHOLD = 1 << 20
ARENA_MAX = 1
KEEP_FREE_BYTES = 8 << 20


@cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def configure() -> bool:
    """Set glibc's mmap threshold and arena count, unless the environment sets them
    (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_ARENA_MAX``); True if glibc took them."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    if mallopt is None:  # not glibc (musl, macOS)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = True
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and ok
    if "MALLOC_ARENA_MAX" not in os.environ:
        ok = bool(mallopt(_M_ARENA_MAX, ARENA_MAX)) and ok
    return ok


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    libc = _libc()
    try:
        fn = libc.malloc_trim if libc is not None else None
    except AttributeError:  # not glibc (musl, macOS): nothing to trim
        return None
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    trim: Callable[[int], int] = fn
    return trim


def trim() -> bool:
    """Return freed memory to the OS; True if anything was released."""
    fn = _malloc_trim()
    return bool(fn(0)) if fn is not None else False


class Spare:
    """``trim`` only when it pays: when the resident size grew more than
    ``KEEP_FREE_BYTES`` since the last trim. Memory a cycle frees and the next one takes
    again does not grow it; a start, a burst of requests or a grown cluster does."""

    def __init__(self, resident: Callable[[], int | None] | None = None) -> None:
        self._resident = resident or resident_bytes
        self._after: int | None = None

    def trim(self) -> bool:
        """Trim if worth it (always where the resident size is unknown); True if anything
        was released."""
        now = self._resident()
        if now is not None and self._after is not None and now - self._after <= KEEP_FREE_BYTES:
            return False
        released = trim()
        self._after = self._resident()
        return released


def resident_bytes() -> int | None:
    """This process's resident size (/proc/self/statm), None where there is no /proc."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
