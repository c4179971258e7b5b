"""A consistent read of the sample store for a request (the status page's charts, the
PromQL API's raw series): ``SampleStore.held`` is None while a cycle renumbers the series,
which lasts a few assignments, so a request waits a little for it."""

from __future__ import annotations

import asyncio

from loadwatcher.model import Columns, Resource
from loadwatcher.pipeline.store import SampleStore

Held = tuple[tuple[tuple[str, Resource], ...], Columns]

TRIES, WAIT_S = 50, 0.01


async def held(store: SampleStore) -> Held | None:
    """The store's keys and samples as one pair, or None when it stayed busy throughout."""
    for _ in range(TRIES):
        pair = store.held()
        if pair is not None:
            return pair
        await asyncio.sleep(WAIT_S)
    return None
