"""A consistent read of the sample store for a request (the status page's charts, the
PromQL API's raw series): ``SampleStore.held`` is None while a cycle renumbers the series
or replaces the columns one at a time (a merge: a fraction of a second at the largest
clusters), so a request waits a little for it."""

from __future__ import annotations

import asyncio

from loadwatcher.pipeline.store import Held, SampleStore

TRIES, WAIT_S = 200, 0.01


async def held(store: SampleStore) -> Held | None:
    """The store's keys, samples and markers as one read, or None when it stayed busy
    throughout."""
    for _ in range(TRIES):
        read = store.held()
        if read is not None:
            return read
        await asyncio.sleep(WAIT_S)
    return None
