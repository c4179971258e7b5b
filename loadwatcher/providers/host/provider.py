"""The embedded default provider: this machine's own CPU and memory utilisation, and its
disk and network utilisation (``io.py``).

One node, named after the host. CPU is the busy share of all cores since the previous
poll (psutil's counters); the very first poll measures over a short interval so that the
service shows a real number at once. Memory is ``(total − available) / total``. Disk and
network are measured between two polls, so the first poll has none.
"""

from __future__ import annotations

import asyncio
import socket

import numpy as np
import psutil

from loadwatcher.model import FetchResult, Resource, Series
from loadwatcher.providers.host import io

FIRST_SAMPLE_INTERVAL_S = 0.25


class HostProvider:
    source = "host"
    # Its samples are stamped with this machine's own clock: they cannot tell whether a
    # step of that clock was right (``engine.clocks``).
    stamps_local_time = True

    def __init__(self, node_name: str | None = None) -> None:
        self.node = node_name or socket.gethostname()
        self._primed = False
        self._io: tuple[float, io.Counters] | None = None  # the last reading and its time

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        if self._primed:
            cpu = float(psutil.cpu_percent(interval=None))
        else:
            # psutil's first non-blocking reading has no reference point: measure once.
            cpu = float(await asyncio.to_thread(psutil.cpu_percent, FIRST_SAMPLE_INTERVAL_S))
            self._primed = True
        mem = psutil.virtual_memory()
        # Whole seconds, like every backend's scrape timestamps; a window ends on a whole second.
        ts = np.array([float(int(now))])
        info = {
            "capacity.cpu": str(psutil.cpu_count() or 1),
            "capacity.memory": str(int(mem.total)),
        }
        series = [
            Series(self.node, Resource.CPU, ts, np.array([cpu])),
            Series(self.node, Resource.MEMORY, ts, np.array([float(mem.percent)])),
        ]
        series += self._io_series(now, ts)
        return FetchResult(
            series=series,
            known_nodes=frozenset({self.node}),
            node_info={self.node: info},
        )

    def _io_series(self, now: float, ts: np.ndarray) -> list[Series]:
        try:
            counters = io.read()
        except (OSError, RuntimeError):  # no /proc/diskstats (a sandbox): CPU and memory only
            return []
        last, self._io = self._io, (now, counters)
        if last is None:
            return []
        found = []
        seconds = now - last[0]
        for resource, percent in (
            (Resource.DISK, io.disk_percent(last[1], counters, seconds)),
            (Resource.NETWORK, io.network_percent(last[1], counters, seconds)),
        ):
            if percent is not None:
                found.append(Series(self.node, resource, ts, np.array([percent])))
        return found

    async def close(self) -> None:
        return None
