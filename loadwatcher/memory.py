"""Give freed heap memory back to the operating system (glibc only; elsewhere a no-op).

A cold start parses ~700,000 samples at 5,000 nodes into short-lived Python objects; glibc
keeps the freed arenas, so the resident size stays at the peak (~400 MB) long after. Asking
glibc to trim after each cycle returns it (measured: 397 -> 254 MB before other savings).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import cache


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        fn = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    trim: Callable[[int], int] = fn
    return trim


def trim() -> bool:
    """Return freed memory to the OS; True if anything was released."""
    fn = _malloc_trim()
    return bool(fn(0)) if fn is not None else False
