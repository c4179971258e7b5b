"""``push.max_series``: the most series the store may hold for pushes to add new ones.

Checked at each request, before it is answered: a request whose new series (held neither
by the store nor by requests taken since the last cycle) would take the total past the
limit is refused whole (413), so a writer that invents node names cannot grow the store,
its rollups and the snapshot without bound, and nothing that was answered 204 is refused
later. Series the store forgets (idle for the whole retention) make room again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from loadwatcher.model import SeriesKey


class HeldSeries(Protocol):
    """What the budget reads of the store (``SampleStore``)."""

    @property
    def keys(self) -> list[SeriesKey]: ...

    def holds(self, key: SeriesKey) -> bool: ...


class SeriesBudget:
    """The store's series plus those taken since the last cycle, against ``limit``."""

    def __init__(self, limit: int, held: HeldSeries) -> None:
        self.limit = limit
        self._held = held
        self._pending: set[SeriesKey] = set()  # new series taken, not yet in the store

    def __len__(self) -> int:
        return len(self._held.keys) + len(self._pending)

    def over(self, keys: Iterable[SeriesKey]) -> int:
        """How many series past the limit taking ``keys`` would go (0: within it); when
        within, they are counted as taken."""
        held, pending = self._held, self._pending
        new = {k for k in keys if k not in pending and not held.holds(k)}
        excess = len(self) + len(new) - self.limit
        if new and excess > 0:
            return excess
        pending.update(new)
        return 0

    def settle(self) -> None:
        """After a cycle: the series it merged are the store's now."""
        held = self._held
        self._pending = {k for k in self._pending if not held.holds(k)}
