"""glibc allocator settings for the service (allocator.configure), checked through mallinfo2.

Each case runs in a fresh interpreter: the allocator's state is per process.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from loadwatcher import allocator
from tests.support.backends import unavailable

PROBE = """
import ctypes, sys
import numpy as np
from loadwatcher import allocator

class Info(ctypes.Structure):
    names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
    _fields_ = [(n, ctypes.c_size_t) for n in names.split()]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
if sys.argv[1] == "configure":
    assert allocator.configure()
big = np.ones(8 << 20, np.uint8)
del big  # by default glibc now raises its mmap threshold to 8 MiB
before = libc.mallinfo2().hblkhd
mid = np.ones(3 << 20, np.uint8)
print("mmapped" if libc.mallinfo2().hblkhd - before >= 3 << 20 else "heap")
"""


@pytest.fixture
def glibc() -> None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        unavailable("mallopt/mallinfo2 are glibc's")


def probe(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.usefixtures("glibc")
def test_large_buffers_stay_out_of_the_heap_once_configured() -> None:
    # Without it, a freed 8 MiB array makes the next 3 MiB one come from the heap, where
    # it fragments what malloc_trim can give back; with it every buffer over 1 MiB is its
    # own mapping, returned to the system when freed.
    assert probe("default") == "heap"
    assert probe("configure") == "mmapped"


@pytest.mark.usefixtures("glibc")
def test_the_environment_wins_over_the_built_in_setting() -> None:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(16 << 20)}
    assert probe("configure", env=env) == "heap"


ARENAS = """
import ctypes, os, sys, threading
from loadwatcher import allocator

if sys.argv[1] == "configure":
    assert allocator.configure()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
hold = threading.Barrier(4)

def work():
    libc.malloc(4096)  # a thread's first allocation picks (or makes) its arena
    hold.wait()

threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
os.dup2(1, 2)  # malloc_stats writes to stderr
libc.malloc_stats()
"""


def arenas(*args: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", ARENAS, *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.count("Arena ")


@pytest.mark.usefixtures("glibc")
def test_worker_threads_share_the_one_arena_once_configured() -> None:
    # Four threads allocating at once: glibc gives each an arena of its own by default,
    # each with its own free space; configured, they share the main one.
    assert arenas("default") > 1
    assert arenas("configure") == 1


class Counting:
    def __init__(self, sizes: list[int | None]) -> None:
        self.sizes = sizes
        self.trims = 0

    def resident(self) -> int | None:
        return self.sizes.pop(0)

    def trim(self) -> bool:
        self.trims += 1
        return True


MiB = 1 << 20


def test_a_cycle_that_reuses_what_the_last_freed_is_not_trimmed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each trim reads the resident size before and (if it trims) after.
    seen = Counting([100 * MiB, 60 * MiB, 66 * MiB, 68 * MiB, 69 * MiB, 64 * MiB, 64 * MiB])
    monkeypatch.setattr(allocator, "trim", seen.trim)
    spare = allocator.Spare(seen.resident)
    assert spare.trim()  # the first: no size since a trim to compare with
    assert not spare.trim() and not spare.trim()  # 6 and 8 MiB over 60: kept
    assert spare.trim()  # 9 MiB over: given back, and 64 is the new mark
    assert not spare.trim()
    assert seen.trims == 2 and not seen.sizes


def test_where_the_resident_size_is_unknown_every_cycle_trims(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = Counting([None] * 6)
    monkeypatch.setattr(allocator, "trim", seen.trim)
    spare = allocator.Spare(seen.resident)
    assert all(spare.trim() for _ in range(3))
    assert seen.trims == 3


@pytest.mark.usefixtures("glibc")
def test_the_resident_size_is_read_from_proc() -> None:
    size = allocator.resident_bytes()
    assert size is not None
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f)
    kib = int(status["VmRSS"].split()[0])
    assert abs(size - kib * 1024) < 16 * MiB
