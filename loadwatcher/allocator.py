"""Give freed heap memory back to the operating system (glibc only; elsewhere a no-op).

A cold start makes many short-lived objects; glibc keeps the freed arenas, so the resident
size would stay at the start's peak long after. ``trim`` after each cycle returns them.

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
