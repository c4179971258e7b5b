"""The corroborating provider: polled beside the main one into a store of its own, only to
flag the nodes whose averages the two disagree on. Its samples are never journaled or
served."""

from __future__ import annotations

import logging

from loadwatcher.errors import ProviderError
from loadwatcher.model import WINDOWS, Resource
from loadwatcher.pipeline import corroboration, rollups
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.providers.base import Provider

log = logging.getLogger("loadwatcher.engine")


class CorroboratingSource:
    """The provider, its samples, and its last failure (``error``; None while it answers)."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.store = SampleStore()
        self.error: str | None = None

    async def fetch(self, now: float, keep_from: float, latest: float, take_back: bool) -> None:
        """Fetch into the store; a failure is logged when it starts and when it ends.
        Samples after ``latest`` are refused (and, with ``take_back``, those held are taken
        back), and series idle since ``keep_from`` forgotten, as in the main store."""
        try:
            result = await self.provider.fetch(now, self.store.newest())
        except ProviderError as exc:
            if self.error is None:
                log.warning("corroborating provider failed: %s", exc)
            self.error = str(exc)
            return
        if self.error is not None:
            log.info("corroborating provider answers again")
        self.error = None
        if take_back:
            self.store.forget_after(latest)
        self.store.add([*result.series, *result.batches], keep_from=keep_from, latest=latest)
        self.store.forget_idle(keep_from)

    def disagreeing(
        self, main: SampleStore, now: float, threshold_pct: float
    ) -> dict[str, set[Resource]]:
        """Per node, the resources whose shortest-window averages differ by more than
        ``threshold_pct``; none while this provider fails (nothing to compare with)."""
        if self.error is not None:
            return {}
        _, end = rollups.window_bounds(now, WINDOWS[0])
        return corroboration.disagreeing(
            corroboration.averages(main.columns, list(main.keys), end),
            corroboration.averages(self.store.columns, list(self.store.keys), end),
            threshold_pct,
        )

    async def close(self) -> None:
        await self.provider.close()
