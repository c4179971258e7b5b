"""The embedded default provider: this machine's own CPU and memory utilisation.

One node, named after the host. CPU is the busy share of all cores since the previous
poll (psutil's counters); the very first poll measures over a short interval so that the
service shows a real number at once. Memory is ``(total − available) / total``.
"""

from __future__ import annotations

import asyncio
import socket

import numpy as np
import psutil

from loadwatcher.model import FetchResult, Resource, Series

FIRST_SAMPLE_INTERVAL_S = 0.25


class HostProvider:
    source = "host"
    # Its samples are stamped with this machine's own clock: they cannot tell whether a
    # step of that clock was right (``engine.clocks``).
    stamps_local_time = True

    def __init__(self, node_name: str | None = None) -> None:
        self.node = node_name or socket.gethostname()
        self._primed = False

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
        return FetchResult(
            series=[
                Series(self.node, Resource.CPU, ts, np.array([cpu])),
                Series(self.node, Resource.MEMORY, ts, np.array([float(mem.percent)])),
            ],
            known_nodes=frozenset({self.node}),
            node_info={self.node: info},
        )

    async def close(self) -> None:
        return None
