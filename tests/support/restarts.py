"""A scripted backend (exact times: one sample per node and resource at ``now``, or
failing, or hanging) and an engine over it with a real journal, for the restart tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import numpy as np

from loadwatcher.engine import Engine, EngineOptions
from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.journal.sqlite import Journal
from loadwatcher.model import FetchResult, Resource, Series

NAMES = {Resource.CPU: "cpu", Resource.MEMORY: "memory"}
NODES = ["a", "b", "c"]


class Backend:
    """One sample per node and resource at ``now``; or failing; or hanging."""

    source = "Prometheus"

    def __init__(self) -> None:
        self.mode = "ok"

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        if self.mode == "fail":
            raise ProviderError(ProviderErrorKind.CONNECT, "connection refused")
        if self.mode == "hang":
            await asyncio.sleep(3600)
        ts = np.array([now])
        return FetchResult(
            series=[Series(n, r, ts, np.array([10.0])) for n in NODES for r in NAMES]
        )

    async def close(self) -> None:
        pass


def engine_over(db: Path, clock: Callable[[], float], poll_interval_s: float = 15.0) -> Engine:
    options = EngineOptions(poll_interval_s=poll_interval_s, retention_s=1020.0)
    return Engine(Backend(), Journal(str(db)), options, NAMES, clock=clock)


async def journal_of(db: Path, last: float, clean: bool = True) -> None:
    """Eight cycles ending at ``last``, every 15 s, then a clean stop (or a crash)."""
    first = engine_over(db, lambda: last)
    await first.recover()
    for k in range(8):
        await first.cycle(last - 15 * (7 - k))
    await stopped(first, clean)


async def stopped(engine: Engine, clean: bool) -> None:
    """Stop ``engine`` after its idle work: cleanly, or as a crash would (the journal's
    connection just goes)."""
    await engine.wait_idle_work()
    if clean:
        await engine.close()
    else:
        assert engine.journal is not None
        await engine.journal.close()
